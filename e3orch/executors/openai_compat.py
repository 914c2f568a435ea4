"""The ``openai`` executor: any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint.

Works with hosted APIs and with local servers (``vllm serve``, ``transformers serve``,
llama.cpp, Ollama's ``/v1``). Pool options:

``base_url`` (required)     e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)
``model`` (required)        the model name the server expects
``api_key_env``             name of the environment variable holding the key (sent as a Bearer
                            token; never logged, never put in outputs or errors)
``timeout_s`` (60)          per attempt
``max_retries`` (3)         retries after the first attempt, on 429, 5xx, timeouts and
                            connection errors (never on other 4xx)
``backoff_s`` (1.0)         first backoff; exponential with jitter, at most ``max_backoff_s`` (30)
``max_retry_after_s`` (30)  cap on a server's ``Retry-After``
``max_tokens``, ``temperature``, ``system_prompt``

Cost is ``usage.prompt_tokens`` × input price + ``usage.completion_tokens`` × output price;
when the server omits ``usage`` the tokens are estimated from the text (and the log says so).

What this module deliberately does not do: streaming, tool calls, function calling, batching
across subtasks, or fall back to another executor (the orchestrator decides that).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import time
from datetime import datetime, timezone
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from e3orch.executors.base import ExecutionResult, Executor, ExecutorSpec, SubtaskRequest, register_executor
from e3orch.executors.prompting import build_messages, estimate_tokens

log = logging.getLogger(__name__)

_DEFAULTS: dict[str, Any] = {
    "base_url": None,
    "model": None,
    "api_key_env": None,
    "timeout_s": 60.0,
    "max_retries": 3,
    "backoff_s": 1.0,
    "max_backoff_s": 30.0,
    "max_retry_after_s": 30.0,
    "max_tokens": None,
    "temperature": None,
    "system_prompt": None,
}


class HTTPStatusFailure(Exception):
    """A non-2xx answer; ``retry_after`` is the server's Retry-After in seconds, if any."""

    def __init__(self, status: int, body: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


class BadResponse(Exception):
    """A 2xx answer that is not a chat completion."""


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, HTTPStatusFailure):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, httpx.TransportError)  # timeouts, refused/reset connections


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


@register_executor("openai")
class OpenAICompatExecutor(Executor):
    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        opts = spec.options
        unknown = set(opts) - set(_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for kind openai; known: {sorted(_DEFAULTS)}")
        o = {**_DEFAULTS, **opts}
        if not o["base_url"]:
            raise ValueError("kind openai needs 'base_url' (e.g. http://127.0.0.1:8000/v1)")
        if not o["model"]:
            raise ValueError("kind openai needs 'model' (the model name the server serves)")
        self.url = str(o["base_url"]).rstrip("/") + "/chat/completions"
        self.model = str(o["model"])
        self.api_key_env: str | None = o["api_key_env"]
        self.timeout_s = float(o["timeout_s"])
        self.max_retries = int(o["max_retries"])
        self.backoff_s = float(o["backoff_s"])
        self.max_backoff_s = float(o["max_backoff_s"])
        self.max_retry_after_s = float(o["max_retry_after_s"])
        self.max_tokens: int | None = None if o["max_tokens"] is None else int(o["max_tokens"])
        self.temperature: float | None = None if o["temperature"] is None else float(o["temperature"])
        self.system_prompt: str | None = o["system_prompt"]
        if self.timeout_s <= 0 or self.max_retries < 0 or self.backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._jitter = wait_exponential_jitter(initial=self.backoff_s, max=self.max_backoff_s, jitter=self.backoff_s)

    # -- plumbing ---------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"environment variable {self.api_key_env} (api_key_env) is not set")
        return key

    def _redact(self, text: str) -> str:
        # A server may echo the request (headers included) in an error body: never pass the key on.
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return text.replace(key, "***") if key else text

    def client(self) -> httpx.AsyncClient:
        """One client per event loop (a client's connection pool is bound to the loop it ran on)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s))
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and not self._client.is_closed:
            try:
                await self._client.aclose()
            except RuntimeError:  # its loop is gone; nothing left to release
                pass
        self._client = None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, HTTPStatusFailure) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_after_s)
        return float(self._jitter(state))

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "openai executor %s: attempt %d failed (%s); retrying in %.2fs",
            self.name, state.attempt_number, self._redact(_describe(exc)), wait,
        )

    async def _post_once(self, payload: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        resp = await self.client().post(self.url, json=payload, headers=headers)
        if resp.status_code >= 300:
            body = resp.text[:500]
            raise HTTPStatusFailure(resp.status_code, body, parse_retry_after(resp.headers.get("retry-after")))
        try:
            data = resp.json()
        except ValueError:
            raise BadResponse(f"response is not JSON: {resp.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise BadResponse("response is not a JSON object")
        return data

    # -- the call ---------------------------------------------------------------------------

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        t0 = time.perf_counter()
        attempts = 0
        try:
            messages = build_messages(request, self.system_prompt)
            payload: dict[str, Any] = {"model": self.model, "messages": messages}
            if self.max_tokens is not None:
                payload["max_tokens"] = self.max_tokens
            if self.temperature is not None:
                payload["temperature"] = self.temperature
            headers = {"Content-Type": "application/json"}
            key = self._api_key()
            if key:
                headers["Authorization"] = f"Bearer {key}"
            retrying = AsyncRetrying(
                stop=stop_after_attempt(self.max_retries + 1),
                wait=self._wait,
                retry=retry_if_exception(_retryable),
                before_sleep=self._before_sleep,
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    data = await self._post_once(payload, headers)
            return self._result(request, messages, data, time.perf_counter() - t0)
        except Exception as exc:  # every failure is a result, never an exception
            error = self._redact(self._failure_text(exc, attempts))
            log.warning("openai executor %s: %s", self.name, error)
            return self.failure(request, error, time.perf_counter() - t0)

    def _failure_text(self, exc: BaseException, attempts: int) -> str:
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, HTTPStatusFailure):
            body = " ".join(exc.body.split())[:300]
            return f"HTTP {exc.status} from {self.url} {tries}" + (f": {body}" if body else "")
        if isinstance(exc, httpx.TimeoutException):
            return f"timed out {tries} ({self.timeout_s:g}s each) calling {self.url}"
        if isinstance(exc, httpx.TransportError):
            return f"connection failed {tries} calling {self.url}: {type(exc).__name__}: {exc}"
        if isinstance(exc, BadResponse):
            return f"bad response from {self.url}: {exc}"
        return f"{type(exc).__name__}: {exc}"

    def _result(
        self, request: SubtaskRequest, messages: list[dict[str, str]], data: dict[str, Any], latency: float
    ) -> ExecutionResult:
        try:
            content = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise BadResponse("no choices[0].message.content in the response") from None
        text = str(content).strip()
        usage = data.get("usage") or {}
        n_in, n_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not isinstance(n_in, int) or not isinstance(n_out, int):
            n_in = estimate_tokens("\n".join(m["content"] for m in messages))
            n_out = estimate_tokens(text)
            log.info("openai executor %s: response has no usage; cost from estimated tokens (%d in, %d out)",
                     self.name, n_in, n_out)
        return self.success(request, text, input_tokens=n_in, output_tokens=n_out, latency_s=latency,
                            empty_is_error=True)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, HTTPStatusFailure):
        return f"HTTP {exc.status}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
