"""The policy backend interface and its registry.

A backend turns prompts into sampled completions with per-token log-probs (under the sampling
model at temperature 1, what the RL ratio needs) and can score given completions. Backends:
``transformers`` (in process, CPU or GPU) and ``vllm`` (a vLLM server in its own environment,
reached over HTTP). Heavy imports happen inside each backend's module, only when it is used.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def prompt_ids(tokenizer: Any, text: str, *, bos: bool = True) -> list[int]:
    """A prompt's token ids as the policy was trained on them: BOS first (when the tokenizer has
    one and ``bos``), then the text without special tokens. Warm start, RL update and every
    backend encode prompts with this one function, so rollout and update log-probs agree."""
    head = [tokenizer.bos_token_id] if bos and tokenizer.bos_token_id is not None else []
    return head + list(tokenizer(text, add_special_tokens=False)["input_ids"])

@dataclass
class Generation:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    finished: bool = True  # ended with EOS (False: cut at max_new_tokens)


class PolicyBackend(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        min_new_tokens: int = 0,
        row_seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        """``n`` completions per prompt (greedy when ``temperature`` is 0). ``min_new_tokens``
        suppresses EOS until then (benchmarks use it to compare equal-length generations).
        ``row_seeds`` (one per prompt): each prompt samples from its own stream, so what it draws
        does not depend on which other prompts share the call (``seed`` seeds the batch as a whole)."""

    @abc.abstractmethod
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """Per-token log-probs of each completion given its prompt (EOS included)."""

    def completion_ids(self, completion: str) -> list[int]:
        """The token ids :meth:`score` scores for ``completion`` (EOS last), as a generation ends."""
        tok = getattr(self, "tokenizer", None)
        if tok is None:
            raise NotImplementedError(f"{self.name or type(self).__name__} backend has no tokenizer to encode completions")
        return list(tok(completion, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]

    @abc.abstractmethod
    def count_tokens(self, text: str) -> int:
        """Prompt length in the policy's tokens (for history trimming)."""

    def update_weights(self, source: Any) -> float:
        """Load new weights (a model or a directory); returns the seconds it took."""
        raise NotImplementedError(f"{self.name} backend cannot update weights")

    def release(self) -> None:  # noqa: B027 - optional hook
        """Free memory/connections."""


_BACKENDS = {
    "transformers": "e3orch.policy.backends.hf:TransformersBackend",
    "vllm": "e3orch.policy.backends.vllm:VLLMBackend",
}


def make_backend(kind: str, model: str, **options: Any) -> PolicyBackend:
    if kind not in _BACKENDS:
        raise ValueError(f"unknown policy backend {kind!r}; known: {', '.join(_BACKENDS)}")
    module, cls = _BACKENDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)(model, **options)


def on_cpu(device: str) -> bool:
    """Whether ``policy.device`` puts the policy on the CPU: ``cpu``, or ``auto`` where torch sees no CUDA
    device (as the transformers backend resolves it). The trainer, the warm start and the episode
    workers decide by this one rule."""
    import torch

    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())


def backend_from_params(pc: Any, model: str | Any) -> PolicyBackend:
    """The backend ``policy`` params select, for a checkpoint directory or model id."""
    opts = ({"device": pc.device, "dtype": pc.dtype, "threads": pc.threads, "batch_size": pc.batch_size,
             "generation_threads": pc.generation_threads}
            if pc.backend == "transformers" else {"base_url": pc.vllm_url})
    return make_backend(pc.backend, str(model), **opts)
