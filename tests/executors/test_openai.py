"""The OpenAI-compatible executor against a real local HTTP server scripted per test.

The server (``ThreadingHTTPServer`` on 127.0.0.1, port 0, in a thread) answers each request
with the next scripted step: a status code with headers and body, or a sleep longer than the
client's timeout. It records every request's headers and JSON body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from e3orch.executors.base import ConfigError, ExecutionResult, ExecutorSpec, SubtaskRequest, build_pool
from e3orch.executors.openai_compat import OpenAICompatExecutor, parse_retry_after

KEY_ENV = "E3ORCH_TEST_OPENAI_KEY"
PRICE = {"input_per_1k": 2.0, "output_per_1k": 4.0}


@dataclass
class Step:
    status: int = 200
    body: Any = None  # dict → JSON; str → raw
    headers: dict[str, str] = field(default_factory=dict)
    sleep_s: float = 0.0


def completion(text: str = "Paris", usage: dict[str, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return body


class ScriptedServer:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
                    step = outer.steps.pop(0) if outer.steps else Step(500, {"error": "script exhausted"})
                if step.sleep_s:
                    time.sleep(step.sleep_s)
                payload = step.body if isinstance(step.body, str) else json.dumps(step.body or {})
                data = payload.replace("{AUTH}", self.headers.get("Authorization", "")).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in step.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *a: None  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, *steps: Step) -> None:
        self.steps = list(steps)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, key)
    return key


def make(base_url: str | None, **options: Any) -> OpenAICompatExecutor:
    opts = {"model": "test-model", "api_key_env": KEY_ENV, "max_retries": 3, "backoff_s": 0.01,
            "max_backoff_s": 0.05, "max_retry_after_s": 0.05, "timeout_s": 5, **options}
    if base_url is not None:
        opts["base_url"] = base_url
    spec = ExecutorSpec.model_validate({"name": "llm", "kind": "openai", "price": PRICE, **opts})
    ex = build_pool([spec])["llm"]
    assert isinstance(ex, OpenAICompatExecutor)
    return ex


def call(ex: OpenAICompatExecutor, instruction: str = "What is the capital of France?",
         context: tuple[tuple[str, str], ...] = ()) -> ExecutionResult:
    async def go() -> ExecutionResult:
        try:
            return await ex.run(SubtaskRequest("t", "s1", instruction, context=context))
        finally:
            await ex.aclose()

    return asyncio.run(go())


def assert_no_key(key: str, result: ExecutionResult, caplog: pytest.LogCaptureFixture) -> None:
    assert key not in json.dumps(result.to_dict())
    assert key not in caplog.text


def test_retries_429_then_500_then_succeeds(server: ScriptedServer, api_key: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.script(
        Step(429, {"error": "slow down"}, headers={"Retry-After": "120"}),  # capped to max_retry_after_s
        Step(500, {"error": "oops"}),
        Step(200, completion("Paris", {"prompt_tokens": 123, "completion_tokens": 45})),
    )
    res = call(make(server.base_url, system_prompt="Be brief."))
    assert res.ok and res.output == "Paris" and res.error is None
    assert len(server.requests) == 3
    assert (res.input_tokens, res.output_tokens) == (123, 45)
    assert res.cost == (123 * 2.0 + 45 * 4.0) / 1000
    assert res.latency_s > 0
    req = server.requests[-1]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {api_key}"
    assert req["json"]["model"] == "test-model"
    assert req["json"]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "attempt 1 failed (HTTP 429)" in caplog.text and "attempt 2 failed (HTTP 500)" in caplog.text
    assert_no_key(api_key, res, caplog)


def test_slow_server_times_out_after_all_attempts(server: ScriptedServer, api_key: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    server.script(*[Step(200, completion(), sleep_s=1.5) for _ in range(3)])
    res = call(make(server.base_url, timeout_s=0.2, max_retries=2))
    assert not res.ok
    assert res.error is not None and res.error.startswith("timed out after 3 attempts (0.2s each)")
    assert len(server.requests) == 3
    assert res.cost == 0.0
    assert_no_key(api_key, res, caplog)


def test_client_error_is_not_retried(server: ScriptedServer, api_key: str,
                                     caplog: pytest.LogCaptureFixture) -> None:
    server.script(Step(400, {"error": {"message": "bad request: unknown parameter"}}), Step(200, completion()))
    res = call(make(server.base_url))
    assert not res.ok and len(server.requests) == 1
    assert res.error is not None and res.error.startswith("HTTP 400 from ") and "after 1 attempt:" in res.error
    assert "unknown parameter" in res.error
    assert_no_key(api_key, res, caplog)


def test_server_errors_until_retries_run_out(server: ScriptedServer, api_key: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    # The server echoes the Authorization header back: the key must still never surface.
    server.script(*[Step(503, '{"error": "overloaded", "echo": "{AUTH}"}') for _ in range(4)])
    res = call(make(server.base_url, max_retries=3))
    assert not res.ok and len(server.requests) == 4
    assert res.error is not None and res.error.startswith("HTTP 503") and "after 4 attempts" in res.error
    assert "Bearer ***" in res.error
    assert_no_key(api_key, res, caplog)


def test_missing_usage_falls_back_to_estimates(server: ScriptedServer, api_key: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    server.script(Step(200, completion("The answer is 42.")))
    res = call(make(server.base_url))
    assert res.ok and res.output == "The answer is 42."
    assert res.input_tokens > 0 and res.output_tokens == 5
    assert res.cost == (res.input_tokens * 2.0 + res.output_tokens * 4.0) / 1000
    assert "no usage" in caplog.text
    assert_no_key(api_key, res, caplog)


def test_dependency_outputs_reach_the_prompt(server: ScriptedServer, api_key: str) -> None:
    server.script(Step(200, completion("ok", {"prompt_tokens": 10, "completion_tokens": 1})))
    res = call(make(server.base_url), "Combine the two facts.", context=(("s1", "fact one"), ("s2", "fact two")))
    assert res.ok
    user = server.requests[0]["json"]["messages"][-1]
    assert user["role"] == "user"
    assert "Combine the two facts." in user["content"]
    assert "[s1]\nfact one" in user["content"] and "[s2]\nfact two" in user["content"]


def test_connection_refused_is_retried_then_reported(api_key: str, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = call(make(f"http://127.0.0.1:{port}/v1", max_retries=1))
    assert not res.ok and res.error is not None
    assert res.error.startswith("connection failed after 2 attempts")
    assert_no_key(api_key, res, caplog)


def test_bad_response_bodies(server: ScriptedServer, api_key: str) -> None:
    server.script(Step(200, "not json at all"), Step(200, {"choices": []}), Step(200, completion("")))
    ex = make(server.base_url)
    first, second, third = call(ex), call(ex), call(ex)
    assert not first.ok and "not JSON" in (first.error or "")
    assert not second.ok and "no choices[0].message.content" in (second.error or "")
    assert not third.ok and third.error == "empty output"
    assert len(server.requests) == 3  # malformed 200s are not retried


def test_missing_key_variable_fails_the_call(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    res = call(make(server.base_url))
    assert not res.ok and res.error is not None and f"{KEY_ENV} (api_key_env) is not set" in res.error
    assert server.requests == []


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="needs 'base_url'"):
        make(None)
    with pytest.raises(ConfigError, match="needs 'model'"):
        build_pool([ExecutorSpec.model_validate({"name": "x", "kind": "openai", "base_url": "http://h/v1"})])
    with pytest.raises(ConfigError, match="unknown option"):
        make("http://127.0.0.1:1/v1", api_key="sk-inline")


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 100))
    assert 90 < (parse_retry_after(future) or 0) <= 100


def test_concurrent_calls_share_one_client(server: ScriptedServer, api_key: str) -> None:
    server.script(*[Step(200, completion(f"a{i}", {"prompt_tokens": 1, "completion_tokens": 1})) for i in range(5)])
    ex = make(server.base_url)

    async def go() -> list[ExecutionResult]:
        try:
            return await asyncio.gather(*(ex.run(SubtaskRequest("t", f"s{i}", "hi")) for i in range(5)))
        finally:
            await ex.aclose()

    results = asyncio.run(go())
    assert all(r.ok for r in results) and sorted(r.output for r in results) == [f"a{i}" for i in range(5)]
