"""The ``transformers`` backend: batched sampling with a KV cache, in process, CPU or GPU.

Prompts are sorted by length and generated in left-padded mini-batches; each completion's
log-probs are the log-softmax of the model's raw logits (temperature 1) at the sampled tokens,
so they are exactly what the trainer's ratio compares against.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from e3orch.policy.backends.base import Generation, PolicyBackend

log = logging.getLogger(__name__)

# transformers' from_pretrained is not thread-safe: two threads loading at once (parallel rollout
# shards under Prefect's thread pool) fail with "Cannot copy out of meta tensor". Loads take turns.
_LOAD_LOCK = threading.Lock()


def load_model(path: str, dtype: Any, device: Any) -> Any:
    with _LOAD_LOCK:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
# Per-load "Loading weights" bars would interleave with the stages' own progress bars.
hf_logging.disable_progress_bar()


def load_tokenizer(path: str) -> Any:
    """Our own tokenizers load as PreTrainedTokenizerFast (AutoTokenizer could swap the
    pre-tokenizer for some configs); anything else through AutoTokenizer."""
    p = Path(path)
    if (p / "e3orch_policy.json").exists():
        tok = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    else:
        tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


class TransformersBackend(PolicyBackend):
    name = "transformers"

    def __init__(
        self,
        model: str | Any,
        *,
        tokenizer: Any = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 32,
        threads: int = 0,
        chat_template: bool = False,
    ) -> None:
        if threads > 0:
            torch.set_num_threads(threads)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if isinstance(model, str):
            if not Path(model).exists() and "/" not in model:
                raise FileNotFoundError(f"policy model {model!r} not found (run `e3orch init-policy` or give a path / hub id)")
            torch_dtype = {"auto": (torch.bfloat16 if self.device.type == "cuda" else torch.float32),
                           "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
            self.tokenizer = tokenizer or load_tokenizer(model)
            self.model = load_model(model, torch_dtype, self.device)
        else:
            self.model, self.tokenizer = model, tokenizer
        self.model.eval()
        self.batch_size = batch_size
        # Policies are trained on raw prompts (warm start and RL alike), so they are prompted raw;
        # chat formatting is only for using an instruct model as-is.
        self.chat = chat_template and bool(getattr(self.tokenizer, "chat_template", None))
        self._lock = threading.Lock()  # one generate at a time per model

    # -- helpers -----------------------------------------------------------------------------
    def format(self, prompt: str) -> str:
        if self.chat:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        return prompt

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None and not self.chat else []
        return [bos + self.tokenizer(self.format(p), add_special_tokens=False)["input_ids"] for p in prompts]

    # -- generation --------------------------------------------------------------------------
    @torch.no_grad()
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
    ) -> list[list[Generation]]:
        with self._lock:
            if seed is not None:
                torch.manual_seed(seed)
            ids = self.encode_prompts(prompts)
            flat = [(i, ids[i]) for i in range(len(prompts)) for _ in range(n)]
            order = sorted(range(len(flat)), key=lambda k: len(flat[k][1]))
            out: list[Generation | None] = [None] * len(flat)
            eos = self.tokenizer.eos_token_id
            pad = self.tokenizer.pad_token_id
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                seqs = [flat[k][1] for k in chunk]
                width = max(len(s) for s in seqs)
                input_ids = torch.full((len(seqs), width), pad, dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, s in enumerate(seqs):
                    input_ids[r, width - len(s):] = torch.tensor(s)
                    mask[r, width - len(s):] = 1
                gen_kwargs: dict[str, Any] = dict(
                    max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, pad_token_id=pad, eos_token_id=eos,
                    output_logits=True, return_dict_in_generate=True, use_cache=True,
                    # A preallocated cache: the default dynamic cache re-copies itself every step,
                    # which made batch 32-64 decoding several times slower on CPU.
                    cache_implementation="static",
                )
                if temperature > 0:
                    gen_kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
                else:
                    gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                res = self.model.generate(
                    input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device), **gen_kwargs
                )
                new = res.sequences[:, width:].cpu()
                logits = torch.stack(res.logits, dim=1).float().cpu()  # [B, T, V]
                lp = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
                for r, k in enumerate(chunk):
                    toks = new[r].tolist()
                    end = toks.index(eos) + 1 if eos in toks else len(toks)
                    finished = eos in toks
                    toks = toks[:end]
                    text_ids = toks[:-1] if finished else toks
                    out[k] = Generation(
                        text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
                        token_ids=toks,
                        logprobs=lp[r, :end].tolist(),
                        prompt_tokens=len(seqs[r]),
                        finished=finished,
                    )
            grouped: list[list[Generation]] = [[] for _ in prompts]
            for (i, _), g in zip(flat, out):
                assert g is not None
                grouped[i].append(g)
            return grouped

    @torch.no_grad()
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        with self._lock:
            eos = self.tokenizer.eos_token_id
            p_ids = self.encode_prompts(prompts)
            c_ids = [self.tokenizer(c, add_special_tokens=False)["input_ids"] + [eos] for c in completions]
            out = []
            for p, c in zip(p_ids, c_ids):
                x = torch.tensor([p + c], device=self.device)
                logits = self.model(x).logits[0, len(p) - 1 : -1].float()
                lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c, device=self.device).unsqueeze(-1))
                out.append(lp.squeeze(-1).cpu().tolist())
            return out

    def update_weights(self, source: Any) -> float:
        t = time.perf_counter()
        with self._lock:
            if isinstance(source, (str, Path)):
                new = load_model(str(source), self.model.dtype, self.device)
                self.model.load_state_dict(new.state_dict())
            elif isinstance(source, dict):
                self.model.load_state_dict(source)
            else:
                self.model.load_state_dict(source.state_dict())
            self.model.eval()
        return time.perf_counter() - t

    def release(self) -> None:
        del self.model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
