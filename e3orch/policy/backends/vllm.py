"""The ``vllm`` backend: a vLLM server (its own environment, GPU host) reached over HTTP.

vLLM's pins clash with Prefect's, so it never lives in this environment: start it with
``make vllm-serve`` (see the README) and point ``policy.vllm_url`` at it. Generation uses the
OpenAI-compatible ``/v1/completions`` with per-token log-probs and token ids; scoring uses
``prompt_logprobs``. Weight sync, without restarting the server:

* ``reload`` (default): the trainer writes its weights into the directory the server serves
  (``policy.vllm_model_dir``, a copy ``make vllm-serve`` makes of the policy, so the warm start
  itself is never overwritten), then asks the server to reload them (``POST /collective_rpc``
  with ``reload_weights``; the server runs with ``VLLM_SERVER_DEV_MODE=1``).
* ``lora``: the trainer saves a LoRA adapter and hot-loads it (``POST /v1/load_lora_adapter``,
  server started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).

Prompts go to the server as token ids, encoded exactly as the trainer encodes them (BOS first
when the tokenizer has one): sent as text, the server would tokenize them without the BOS the
policy was trained with, and the rollout's log-probs would not be the update's.

Only httpx is imported here; nothing of vLLM.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from e3orch.policy.backends.base import Generation, PolicyBackend, prompt_ids


class VLLMBackend(PolicyBackend):
    name = "vllm"

    def __init__(self, model: str, *, base_url: str = "http://localhost:8100/v1", tokenizer: Any = None,
                 served_model: str | None = None, sync: str = "reload", timeout_s: float = 600.0,
                 lora_name: str = "e3orch-policy", sync_dir: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.root_url = self.base_url.removesuffix("/v1")
        self.model_path = model
        self.model_dir = sync_dir or model  # where update_weights writes: the folder the server serves
        self.client = httpx.Client(timeout=timeout_s)
        try:
            models = self.client.get(f"{self.base_url}/models").json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise ConnectionError(
                f"no vLLM server at {self.base_url} ({type(exc).__name__}); start one with `make vllm-serve "
                f"VLLM_MODEL={model}` on the GPU host or set policy.vllm_url"
            ) from None
        self.served_model = served_model or models[0]["id"]
        self.sync = sync
        self.lora_name = lora_name
        self.active_model = self.served_model
        if tokenizer is None:
            from e3orch.policy.backends.hf import load_tokenizer

            tokenizer = load_tokenizer(model)
        self.tokenizer = tokenizer

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        """Prompt token ids as the trainer builds them: BOS (when the tokenizer has one), then the text."""
        return [prompt_ids(self.tokenizer, p) for p in prompts]

    def generate(self, prompts: Sequence[str], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 64, seed: int | None = None, min_new_tokens: int = 0,
                 row_seeds: Sequence[int] | None = None) -> list[list[Generation]]:
        if row_seeds is not None and temperature > 0:  # vLLM seeds per request: one request per prompt
            return [self.generate([p], n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                  seed=s % 2**31, min_new_tokens=min_new_tokens)[0] for p, s in zip(prompts, row_seeds)]
        body: dict[str, Any] = {
            "model": self.active_model, "prompt": self.encode_prompts(prompts), "n": n, "temperature": temperature,
            "top_p": top_p, "max_tokens": max_new_tokens, "min_tokens": min_new_tokens, "logprobs": 0,
            "return_tokens_as_token_ids": True, "skip_special_tokens": True,
        }
        if seed is not None:
            body["seed"] = seed
        r = self.client.post(f"{self.base_url}/completions", json=body)
        r.raise_for_status()
        out: list[list[Generation]] = [[] for _ in prompts]
        eos = self.tokenizer.eos_token_id
        for ch in sorted(r.json()["choices"], key=lambda c: c["index"]):
            lp = ch.get("logprobs") or {}
            ids = [int(t.split(":", 1)[1]) for t in lp.get("tokens", []) if t.startswith("token_id:")]
            finished = ch.get("finish_reason") == "stop"
            if finished and (not ids or ids[-1] != eos):
                ids.append(eos)  # vLLM omits the EOS it stopped on; the trainer trains on it
            lps = [float(x) for x in lp.get("token_logprobs", [])]
            lps += [0.0] * (len(ids) - len(lps))
            out[ch["index"] // n].append(Generation(ch["text"], ids, lps, 0, finished))
        return out

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        res = []
        for p, c in zip(prompts, completions):
            (ids,) = self.encode_prompts([p])
            n_prompt = len(ids)
            body = {"model": self.active_model, "prompt": ids + self.completion_ids(c), "max_tokens": 1,
                    "prompt_logprobs": 0, "temperature": 0.0}
            r = self.client.post(f"{self.base_url}/completions", json=body)
            r.raise_for_status()
            plp = r.json()["choices"][0].get("prompt_logprobs") or []
            vals = [max(d.values(), key=lambda v: v.get("rank", 0) == 1)["logprob"] if d else 0.0 for d in plp]
            res.append([float(v) for v in vals[n_prompt:]])
        return res

    def update_weights(self, source: Any) -> float:
        t = time.perf_counter()
        if self.sync == "lora":
            adapter = Path(self.model_dir) / "lora-adapter"
            source.save_pretrained(adapter)  # a peft model saves only its adapter
            self.client.post(f"{self.root_url}/v1/unload_lora_adapter", json={"lora_name": self.lora_name})
            r = self.client.post(f"{self.root_url}/v1/load_lora_adapter",
                                 json={"lora_name": self.lora_name, "lora_path": str(adapter)})
            r.raise_for_status()
            self.active_model = self.lora_name
        else:
            source.save_pretrained(self.model_dir, safe_serialization=True)
            r = self.client.post(f"{self.root_url}/collective_rpc", json={"method": "reload_weights"})
            r.raise_for_status()
            self.client.post(f"{self.root_url}/reset_prefix_cache")
        return time.perf_counter() - t

    def release(self) -> None:
        self.client.close()
