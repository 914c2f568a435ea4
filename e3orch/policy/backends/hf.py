"""The ``transformers`` backend: batched sampling with a KV cache, in process, CPU or GPU.

``generate`` works in mini-batches of ``batch_size`` completions (prompts in token order, so
prompts with a common beginning share a mini-batch) and runs its own prefill and decode loop:

* **Shared-prefix prefill.** Identical prompts (``n`` > 1, duplicates) are prefilled once. The
  distinct prompts are grouped by common leading tokens (``prefix_groups``: a group shares at
  least ``MIN_SHARED_PREFIX`` tokens, e.g. a task's executor cards and history). A group's
  prefix is prefilled once, like a prompt of its own; then each member's remaining tokens run
  on a copy of the prefix's keys, with position ids that continue the prompt's own count. Lone
  prompts and prefixes of similar length share a forward pass (right-padded, plain causal).
* **Decoding.** Every row's prompt keys are copied (prefix included) into one preallocated
  cache, right-aligned, and all rows decode together, one forward pass per token, with an
  attention mask over the left padding and per-row position ids. Sampling: temperature, top-p,
  EOS suppressed until ``min_new_tokens``, each row stopping at its EOS; ``seed`` seeds torch.

Each completion's log-probs are the log-softmax of the model's raw logits (temperature 1) at
the sampled tokens, so they are exactly what ``score`` (and the trainer's ratio) computes for
the same prompt and completion. Models whose attention the own loop cannot mask (anything but
sdpa/eager, sliding-window layers) fall back to ``model.generate`` on left-padded mini-batches.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.cache_utils import Cache, DynamicLayer
from transformers.utils import logging as hf_logging

from e3orch.policy.backends.base import Generation, PolicyBackend, prompt_ids
from e3orch.seeding import seed_sampler

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


# Prompts of a mini-batch sharing at least this many leading tokens prefill them once.
MIN_SHARED_PREFIX = 32
# Prefill batches: at most this many padded tokens per forward pass (bounds the size of the
# suffix pass's mask) and this fraction of them padding.
_PREFILL_TOKENS = 8192
_PREFILL_PADDING = 0.125


def cache_kwarg(model: Any) -> str | None:
    """The keyword ``model``'s forward takes a KV cache by: transformers renamed
    ``past_key_values`` to ``cache`` (5.x); None: neither."""
    params = inspect.signature(model.forward).parameters
    return next((k for k in ("cache", "past_key_values") if k in params), None)


def full_attention_model(model: Any) -> bool:
    """Whether ``model`` attends with sdpa or eager attention (which take the masks built here: 4-D
    for the own decode loop, a padded 2-D one over cache and new tokens for training's shared
    prompts) and full attention in every layer (no sliding windows)."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return False
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    layer_types = getattr(text, "layer_types", None) or ["full_attention"]
    return (getattr(cfg, "_attn_implementation", None) in ("sdpa", "eager")
            and all(t == "full_attention" for t in layer_types)
            and not getattr(text, "use_sliding_window", False))


def left_padded(seqs: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded to the longest: ``input_ids`` and ``attention_mask``, [B, T]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, width - len(s):] = torch.tensor(list(s))
        mask[r, width - len(s):] = 1
    return ids, mask


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_groups(seqs: Sequence[Sequence[int]], min_shared: int = MIN_SHARED_PREFIX) -> list[tuple[list[int], int]]:
    """Split distinct token sequences into prefill units: ``(member indices, shared prefix length)``.

    In token order, prompts with a common beginning are neighbours; a dynamic programme cuts that
    order into runs that minimise the prefill work. A run of several prompts sharing at least
    ``min_shared`` leading tokens is one unit that computes that prefix once (capped so every
    member keeps at least one token of its own); any other prompt is a unit of its own, with
    prefix length 0.
    """
    order = sorted(range(len(seqs)), key=lambda u: tuple(seqs[u]))
    lcp = [_common_prefix(seqs[order[i]], seqs[order[i + 1]]) for i in range(len(order) - 1)]
    n = len(order)
    best = [0.0] + [float("inf")] * n
    choice = [(0, 0)] * (n + 1)  # (run start, prefix) of the best split of order[:j]
    for j in range(1, n + 1):
        shared, total, shortest = 1 << 30, 0, 1 << 30
        for i in range(j - 1, -1, -1):
            length = len(seqs[order[i]])
            total, shortest = total + length, min(shortest, length)
            if i == j - 1:
                p, width = 0, length
            else:
                shared = min(shared, lcp[i])
                p = min(shared, shortest - 1)
                if p < min_shared:
                    break  # the shared prefix only shrinks as the run grows
                width = total - (j - i - 1) * p
            cost = best[i] + width
            if cost < best[j]:
                best[j], choice[j] = cost, (i, p)
    groups = []
    j = n
    while j > 0:
        i, p = choice[j]
        groups.append(([order[k] for k in range(i, j)], p))
        j = i
    return groups[::-1]


def _sample(logits: torch.Tensor, *, suppress: int | None, temperature: float, top_p: float,
            streams: Sequence[torch.Generator] | None = None) -> torch.Tensor:
    """Next tokens from raw logits ``[B, V]``: greedy at temperature 0, else temperature and
    nucleus (top-p) sampling; ``suppress`` (EOS before ``min_new_tokens``) is never chosen.
    ``streams``: one generator per row, so a row's draws do not depend on the other rows."""
    if suppress is not None:
        logits = logits.clone()
        logits[:, suppress] = float("-inf")
    if temperature <= 0:
        return logits.argmax(-1)
    scores = logits / temperature
    if top_p < 1.0:  # drop the least likely tokens whose total mass is at most 1 - top_p (keep the top one)
        sorted_scores, idx = torch.sort(scores, descending=False)
        drop = sorted_scores.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, idx, drop), float("-inf"))
    # Inverse-CDF sampling: torch.multinomial draws an exponential per vocabulary entry (0.5 ms a
    # step at batch 32 on a CPU). Zero-probability tokens are never hit (right=True).
    cdf = scores.softmax(-1).cumsum(-1)
    if streams is None:
        u = torch.rand(cdf.shape[0], 1, device=cdf.device, dtype=cdf.dtype)
    else:
        u = torch.cat([torch.rand(1, 1, generator=g, dtype=cdf.dtype) for g in streams]).to(cdf.device)
    u = u * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


@dataclass
class _Prefilled:
    """One prefill batch: per-layer (keys, values) ``[rows, heads, width, dim]`` and, per prompt,
    its row and the column ranges of its tokens in prompt order (its group's prefix, its own part)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    where: dict[int, tuple[int, list[tuple[int, int]]]]


class _KVLayer(DynamicLayer):
    """One layer's keys/values in a preallocated buffer ``[B, heads, capacity, dim]``: ``update``
    writes at the fill point and returns views, so decoding neither re-copies the cache (as
    ``DynamicLayer``'s concatenation does) nor attends over unused slots (as ``StaticLayer`` does).
    Without buffers it allocates them on its first update (heads, dim and dtype from the model)."""

    def __init__(self, rows: int, capacity: int, keys: torch.Tensor | None = None,
                 values: torch.Tensor | None = None, length: int = 0) -> None:
        super().__init__()
        self.rows, self.capacity = rows, capacity
        self.kbuf, self.vbuf, self.length = keys, values, length
        if keys is not None:
            self.device = keys.device
            self.is_initialized = True
            self._view()

    def _view(self) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        self.keys = self.kbuf[:, :, : self.length]
        self.values = self.vbuf[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.kbuf is None:
            k, v = key_states, value_states
            self.kbuf = k.new_empty(self.rows, k.shape[1], self.capacity, k.shape[3])
            self.vbuf = v.new_empty(self.rows, v.shape[1], self.capacity, v.shape[3])
            self.device = k.device
            self.is_initialized = True
        assert self.vbuf is not None
        end = self.length + key_states.shape[-2]
        self.kbuf[:, :, self.length : end] = key_states
        self.vbuf[:, :, self.length : end] = value_states
        self.length = end
        return self.kv()

    def kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled part: (keys, values) views ``[B, heads, length, dim]``."""
        self._view()
        assert self.keys is not None and self.values is not None
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


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
        generation_threads: int = 0,
    ) -> None:
        if threads > 0:
            torch.set_num_threads(threads)
        self.generation_threads = generation_threads
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"policy.device: {device}, but this torch ({torch.__version__}) sees no CUDA device; "
                             "set policy.device to auto or cpu")
        self.device = torch.device(device)
        self.model_path = model if isinstance(model, str) else None
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
        self._cache_kw = cache_kwarg(self.model)

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
        return [prompt_ids(self.tokenizer, self.format(p), bos=not self.chat) for p in prompts]

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
        row_seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        with self._lock, self._threads():
            if seed is not None:
                self._seed(seed)
            ids = self.encode_prompts(prompts)
            flat = [(i, ids[i]) for i in range(len(prompts)) for _ in range(n)]
            own = self._own_loop()
            streams = None
            if row_seeds is not None and temperature > 0:
                if len(row_seeds) != len(prompts):
                    raise ValueError(f"row_seeds: {len(row_seeds)} seeds for {len(prompts)} prompts")
                # one stream per completion (the j-th of prompt i), in ``flat``'s order
                flat_seeds = [(row_seeds[i] * 1_000_003 + j) % 2**63 for i in range(len(prompts)) for j in range(n)]
                if not own:  # model.generate samples from the global stream: one row at a time
                    return [[self._one(ids[i], flat_seeds[i * n + j], temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens)
                             for j in range(n)] for i in range(len(prompts))]
                streams = [torch.Generator().manual_seed(x) for x in flat_seeds]
            # Prefix sharing wants prompts with common beginnings in one mini-batch (token order);
            # model.generate's left padding wants equal lengths together.
            order = sorted(range(len(flat)), key=(lambda k: flat[k][1]) if own else (lambda k: len(flat[k][1])))
            out: list[Generation | None] = [None] * len(flat)
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                seqs = [flat[k][1] for k in chunk]
                if own:
                    new, lp = self._generate_shared(
                        seqs, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                        min_new_tokens=min_new_tokens, streams=[streams[k] for k in chunk] if streams else None)
                else:
                    new, lp = self._generate_hf(seqs, temperature=temperature, top_p=top_p,
                                                max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens)
                for r, k in enumerate(chunk):
                    out[k] = self._generation(new[r], lp[r], len(seqs[r]))
            grouped: list[list[Generation]] = [[] for _ in prompts]
            for (i, _), g in zip(flat, out):
                assert g is not None
                grouped[i].append(g)
            return grouped

    def _generation(self, new: torch.Tensor, lp: torch.Tensor, prompt_tokens: int) -> Generation:
        """One row's new tokens (padded after EOS) and log-probs as a :class:`Generation`."""
        toks = new.tolist()
        eos = self.tokenizer.eos_token_id
        finished = eos in toks
        end = toks.index(eos) + 1 if finished else len(toks)
        toks = toks[:end]
        text_ids = toks[:-1] if finished else toks
        return Generation(text=self.tokenizer.decode(text_ids, skip_special_tokens=True), token_ids=toks,
                          logprobs=lp[:end].tolist(), prompt_tokens=prompt_tokens, finished=finished)

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        """``policy.generation_threads`` torch threads in the calling thread while it generates or
        scores, then as many as before. On two cores a small policy decodes as fast on one thread,
        and the other core is left to the episodes the event loop runs meanwhile (a rollout's
        probes, an evaluation's episodes) instead of both threads waiting on one another."""
        n = self.generation_threads
        before = torch.get_num_threads()
        if n <= 0 or n == before or self.device.type != "cpu":
            yield
            return
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _seed(self, seed: int) -> None:
        """Seed the stream sampling draws from (:func:`e3orch.seeding.seed_sampler`)."""
        seed_sampler(seed, self.device)

    def _one(self, seq: list[int], seed: int, **kw: Any) -> Generation:
        """One completion by ``model.generate`` from its own seed (row seeds without the own loop)."""
        self._seed(seed)
        new, lp = self._generate_hf([seq], **kw)
        return self._generation(new[0], lp[0], len(seq))

    def _own_loop(self) -> bool:
        """The own prefill/decode loop builds 4-D masks (sdpa or eager attention) and assumes full
        attention in every layer; other models (flash attention, sliding windows) use
        ``model.generate``."""
        return full_attention_model(self.model) and self._cache_kw is not None

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor | None, mask: torch.Tensor | None,
                 layers: list[_KVLayer], logits_to_keep: int | torch.Tensor = 1) -> torch.Tensor:
        assert self._cache_kw is not None
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                         logits_to_keep=logits_to_keep, **{self._cache_kw: Cache(layers=list(layers))})
        return out.logits.float()

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """A boolean ``[B, 1, q, kv]`` mask (True: attend) as the attention implementation takes
        it: sdpa boolean, eager additive."""
        return allowed if self.model.config._attn_implementation == "sdpa" else self._additive(allowed)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """A boolean ``[B, 1, q, kv]`` mask (True: attend) as the additive float mask that both
        sdpa and eager attention take."""
        dtype = self.model.dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)

    def _generate_shared(
        self, seqs: list[list[int]], *, temperature: float, top_p: float, max_new_tokens: int, min_new_tokens: int,
        streams: Sequence[torch.Generator] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One mini-batch: shared-prefix prefill of its distinct prompts, then decoding all rows
        together. Returns the new tokens ``[B, T]`` (padded after EOS) and their log-probs under
        the raw logits."""
        dev, B = self.device, len(seqs)
        if max_new_tokens <= 0:
            return torch.zeros(B, 0, dtype=torch.long), torch.zeros(B, 0)
        uniq: dict[tuple[int, ...], int] = {}
        row_u = [uniq.setdefault(tuple(s), len(uniq)) for s in seqs]
        batches, first_logits = self._prefill(list(uniq))
        # Decode cache: row r holds its prompt's keys (its group's prefix copied in) right-aligned
        # at column t0, the new tokens after; the left padding is masked.
        t0 = max(len(s) for s in seqs)
        cap = t0 + max_new_tokens
        valid = torch.ones(B, cap, dtype=torch.bool)
        kbufs: list[torch.Tensor] = []
        vbufs: list[torch.Tensor] = []
        for pb in batches:
            for i, (k, v) in enumerate(pb.kv):
                if len(kbufs) <= i:
                    kbufs.append(k.new_empty(B, k.shape[1], cap, k.shape[3]))
                    vbufs.append(v.new_empty(B, v.shape[1], cap, v.shape[3]))
                for r in range(B):
                    if row_u[r] not in pb.where:
                        continue
                    br, spans = pb.where[row_u[r]]
                    col = t0 - len(seqs[r])
                    kbufs[i][r, :, :col] = 0  # masked, but 0 x NaN garbage would still be NaN
                    vbufs[i][r, :, :col] = 0
                    for a, b in spans:
                        kbufs[i][r, :, col : col + b - a] = k[br, :, a:b]
                        vbufs[i][r, :, col : col + b - a] = v[br, :, a:b]
                        col += b - a
        for r, s in enumerate(seqs):
            valid[r, : t0 - len(s)] = False
        del batches
        layers = [_KVLayer(B, cap, k, v, t0) for k, v in zip(kbufs, vbufs)]
        mask = None if bool(valid.all()) else self._additive(valid.to(dev)[:, None, None, :])
        logits = first_logits[torch.tensor(row_u, device=dev)]
        pos = torch.tensor([len(s) for s in seqs], device=dev)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        new = torch.full((B, max_new_tokens), pad, dtype=torch.long, device=dev)
        lps = torch.zeros(B, max_new_tokens, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        steps = 0
        for t in range(max_new_tokens):
            tok = _sample(logits, suppress=eos if t < min_new_tokens else None, temperature=temperature, top_p=top_p,
                          streams=streams)
            tok = tok.masked_fill(done, pad)
            new[:, t] = tok
            lps[:, t] = torch.log_softmax(logits, -1).gather(-1, tok[:, None]).squeeze(-1)
            steps = t + 1
            if eos is not None:
                done |= tok == eos
            if t + 1 == max_new_tokens or bool(done.all()):
                break
            logits = self._forward(tok[:, None], (pos + t)[:, None],
                                   mask[..., : t0 + t + 1] if mask is not None else None, layers)[:, -1]
        return new[:, :steps].cpu(), lps[:, :steps].cpu()

    def _prefill(self, distinct: list[tuple[int, ...]]) -> tuple[list[_Prefilled], torch.Tensor]:
        """Prefill distinct prompts, computing shared prefixes once, in two phases.

        1. Lone prompts and the shared prefixes of prefix groups: plain causal forward passes,
           sequences of similar length batched (right-padded, little padding).
        2. Each group member's own suffix, on a cache holding a copy of its group's prefix keys
           (left-padded to the longest prefix), under a mask over the prefix padding and the
           causal suffix, with position ids that continue the prompt's own count.

        Every prompt thus gets exactly the keys and next-token logits of an unpadded forward
        pass. Returns the batches holding the prompts' keys (lone prompts from phase 1, group
        members from phase 2) and every prompt's next-token logits ``[U, V]``.
        """
        dev = self.device
        groups = prefix_groups(distinct)
        # Phase 1 sequences: (tokens, lone prompt's index or None, prefix's group index or None)
        seqs = [(distinct[m[0]], m[0], None) if len(m) == 1 else (distinct[m[0]][:p], None, g)
                for g, (m, p) in enumerate(groups)]
        batches: list[list[int]] = []
        for k in sorted(range(len(seqs)), key=lambda k: -len(seqs[k][0])):
            if batches:
                b = batches[-1]
                width, used = len(seqs[b[0]][0]), sum(len(seqs[x][0]) for x in b) + len(seqs[k][0])
                if width * (len(b) + 1) <= min(_PREFILL_TOKENS, used * (1 + _PREFILL_PADDING)):
                    b.append(k)
                    continue
            batches.append([k])
        logits = torch.empty(0)
        prefilled: list[_Prefilled] = []
        prefix_kv: dict[int, tuple[list[tuple[torch.Tensor, torch.Tensor]], int]] = {}  # group: (kv, row)

        def keep(out: torch.Tensor, cols: list[int], ends: dict[int, tuple[int, int]]) -> None:
            nonlocal logits
            if logits.numel() == 0:
                logits = torch.empty(len(distinct), out.shape[-1], device=dev)
            for u, (r, c) in ends.items():
                logits[u] = out[r, cols.index(c)]

        for b in batches:
            width = len(seqs[b[0]][0])
            ids = torch.full((len(b), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)
            where: dict[int, tuple[int, list[tuple[int, int]]]] = {}
            for r, k in enumerate(b):
                toks, u, g = seqs[k]
                ids[r, : len(toks)] = torch.tensor(toks)
                if u is not None:
                    where[u] = (r, [(0, len(toks))])
            layers = [_KVLayer(len(b), width) for _ in range(self._n_layers())]
            ends = {u: (r, spans[0][1] - 1) for u, (r, spans) in where.items()}
            cols = sorted({c for _, c in ends.values()}) or [width - 1]
            # right padding needs no mask: causal attention never reaches the pads after a prompt
            out = self._forward(ids.to(dev), None, None, layers, logits_to_keep=torch.tensor(cols, device=dev))
            keep(out, cols, ends)
            kv = [la.kv() for la in layers]
            prefilled.append(_Prefilled(kv, where))
            for r, k in enumerate(b):
                g = seqs[k][2]
                if g is not None:
                    prefix_kv[g] = (kv, r)
        members = [(u, g, p) for g, (m, p) in enumerate(groups) if len(m) > 1 for u in m]
        if not members:
            return prefilled, logits
        pmax = max(p for _, _, p in members)
        smax = max(len(distinct[u]) - p for u, _, p in members)
        per_pass = max(1, _PREFILL_TOKENS // smax)
        for a in range(0, len(members), per_pass):
            part = members[a : a + per_pass]
            n = len(part)
            ids = torch.full((n, smax), self.tokenizer.pad_token_id or 0, dtype=torch.long)
            pos = torch.zeros(n, smax, dtype=torch.long)
            valid = torch.zeros(n, pmax + smax, dtype=torch.bool)
            layers = []
            for i in range(self._n_layers()):
                k0, v0 = prefix_kv[part[0][1]][0][i]
                kbuf = k0.new_zeros(n, k0.shape[1], pmax + smax, k0.shape[3])
                vbuf = v0.new_zeros(n, v0.shape[1], pmax + smax, v0.shape[3])
                for r, (_, g, p) in enumerate(part):
                    kv, row = prefix_kv[g]
                    kbuf[r, :, pmax - p : pmax] = kv[i][0][row, :, :p]
                    vbuf[r, :, pmax - p : pmax] = kv[i][1][row, :, :p]
                layers.append(_KVLayer(n, pmax + smax, kbuf, vbuf, pmax))
            where, ends = {}, {}
            for r, (u, _, p) in enumerate(part):
                s = distinct[u][p:]
                ids[r, : len(s)] = torch.tensor(s)
                pos[r] = torch.arange(p, p + smax)
                valid[r, pmax - p : pmax + len(s)] = True
                where[u] = (r, [(pmax - p, pmax), (pmax, pmax + len(s))])
                ends[u] = (r, len(s) - 1)
            q = torch.arange(smax, device=dev)[:, None] + pmax
            c = torch.arange(pmax + smax, device=dev)[None, :]
            allowed = (valid.to(dev)[:, None, :] & (c <= q)) | (c == q)  # a pad query sees itself
            cols = sorted({c for _, c in ends.values()})
            out = self._forward(ids.to(dev), pos.to(dev), self._mask(allowed[:, None]), layers,
                                logits_to_keep=torch.tensor(cols, device=dev))
            keep(out, cols, ends)
            prefilled.append(_Prefilled([la.kv() for la in layers], where))
        return prefilled, logits

    def _n_layers(self) -> int:
        return int(self.model.config.get_text_config().num_hidden_layers)

    def _generate_hf(
        self, seqs: list[list[int]], *, temperature: float, top_p: float, max_new_tokens: int, min_new_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``model.generate`` on one left-padded mini-batch (attention implementations the own
        loop does not build masks for)."""
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        input_ids, mask = left_padded(seqs, pad)
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, pad_token_id=pad, eos_token_id=eos,
            output_logits=True, return_dict_in_generate=True, use_cache=True,
            # A preallocated cache: the default dynamic cache re-copies itself every step.
            cache_implementation="static",
        )
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        res = self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device), **gen_kwargs
        )
        new = res.sequences[:, input_ids.shape[1]:].cpu()
        logits = torch.stack(res.logits, dim=1).float().cpu()  # [B, T, V]
        return new, torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """Per-token log-probs of each completion given its prompt, in right-padded batches of
        similar length (causal attention never reaches the padding after a sequence, so each row's
        logits are those of its unpadded forward pass)."""
        with self._lock, self._threads():
            p_ids = self.encode_prompts(prompts)
            c_ids = [self.completion_ids(c) for c in completions]
            seqs = [p + c for p, c in zip(p_ids, c_ids)]
            out: list[list[float]] = [[] for _ in seqs]
            order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
            pad = self.tokenizer.pad_token_id or 0
            start = 0
            while start < len(order):
                end = start + 1
                while end < len(order) and len(seqs[order[end]]) * (end - start + 1) <= max(_PREFILL_TOKENS, len(seqs[order[end]])):
                    end += 1
                chunk = order[start:end]
                width = len(seqs[chunk[-1]])
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                for r, i in enumerate(chunk):
                    ids[r, : len(seqs[i])] = torch.tensor(seqs[i])
                logp = torch.log_softmax(self.model(ids.to(self.device), use_cache=False).logits.float(), -1)
                for r, i in enumerate(chunk):
                    n_p, n_c = len(p_ids[i]), len(c_ids[i])
                    rows = logp[r, n_p - 1 : n_p - 1 + n_c]
                    out[i] = rows.gather(-1, torch.tensor(c_ids[i], device=self.device).unsqueeze(-1)).squeeze(-1).cpu().tolist()
                start = end
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
