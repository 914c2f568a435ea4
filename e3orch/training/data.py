"""Tokenised (prompt, completion) examples and length-bucketed batches for the trainers.

Only completion tokens carry loss; the prompt is context. Batches group examples of similar
length (less padding) and are right-padded; ``completion_mask`` marks the loss positions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from e3orch.policy.backends.base import prompt_ids


@dataclass
class Example:
    prompt_ids: list[int]
    completion_ids: list[int]         # including EOS
    advantage: float = 0.0
    old_logprobs: list[float] = field(default_factory=list)
    weight: float = 1.0               # per-example loss weight (e.g. 1/decisions of its rollout)
    group: str = ""                   # rollout/tree id (for per-rollout averaging)
    pg_from: int = 0                  # completion tokens before this one get no policy gradient (train.pg_tokens)
    ref_logprobs: list[float] = field(default_factory=list)  # under the frozen reference (filled by the update)


def encode_pair(tokenizer: Any, prompt: str, completion: str, max_len: int) -> Example | None:
    p = prompt_ids(tokenizer, prompt)
    c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    if len(c) >= max_len:
        return None
    if len(p) + len(c) > max_len:
        p = p[len(p) + len(c) - max_len :]  # keep the end of the prompt (the decision asked for)
    return Example(p, c)


def merge_copies(examples: Sequence[Example]) -> list[Example]:
    """One example per distinct (prompt, completion), weighing as many as its copies, in first-seen
    order. The SFT loss counts a merged example's tokens ``weight`` times, so the loss over a set
    is unchanged; an epoch computes each distinct pair once (the warm start's oversampled answers
    and repeated states were about 28% of its examples)."""
    merged: dict[tuple[tuple[int, ...], tuple[int, ...]], Example] = {}
    for e in examples:
        key = (tuple(e.prompt_ids), tuple(e.completion_ids))
        if key in merged:
            merged[key].weight += e.weight
        else:
            merged[key] = Example(list(e.prompt_ids), list(e.completion_ids), weight=e.weight)
    return list(merged.values())


def make_batches(examples: Sequence[Example], tokens_per_batch: int, rng: random.Random,
                 group_prompts: bool = False) -> list[list[Example]]:
    """Length-bucketed batches of at most ``tokens_per_batch`` padded tokens, in random order.

    With ``group_prompts``, the examples that share a prompt (one question taught several answers,
    as a mix of teachers does) go into the same batch whenever they fit in one together: each
    batch then teaches a question the answers' mixture at once instead of one draw of it. Why:
    drawn one at a time, a question answered ``#2`` by one teacher and ``#3`` by another mostly
    teaches noise, and a ~1M-parameter policy fitted its plan slots to the question's length
    instead of its words (docs/benchmarks.md, "Every answer of a question in one batch")."""
    def length(e: Example) -> int:
        return len(e.prompt_ids) + len(e.completion_ids)

    if group_prompts:  # prompts of one length side by side, each prompt's examples in one run
        order = sorted(examples, key=lambda e: (len(e.prompt_ids), e.prompt_ids, len(e.completion_ids)))
        groups: list[list[Example]] = []
        for e in order:
            if groups and groups[-1][0].prompt_ids == e.prompt_ids:
                groups[-1].append(e)
            else:
                groups.append([e])
    else:
        groups = [[e] for e in sorted(examples, key=length)]
    batches: list[list[Example]] = []
    cur: list[Example] = []
    width = 0
    for group in groups:
        w = max(length(e) for e in group)
        if cur and max(width, w) * (len(cur) + len(group)) > tokens_per_batch:
            batches.append(cur)
            cur, width = [], 0
        for e in group:  # a group too large for one batch alone fills as many as it needs
            if cur and max(width, length(e)) * (len(cur) + 1) > tokens_per_batch:
                batches.append(cur)
                cur, width = [], 0
            cur.append(e)
            width = max(width, length(e))
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(batch: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids``/``attention_mask``/``position_ids`` [B, T] plus the completion frame.

    Left padding makes every sequence end at column T-1, so the completions all sit in the last
    ``K`` = longest-completion columns. ``completion_mask``, ``old_logprobs`` and
    ``ref_logprobs`` are [B, K] in that frame, and the model only has to compute logits for those
    columns.
    """
    width = max(len(e.prompt_ids) + len(e.completion_ids) for e in batch)
    k = max(len(e.completion_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    cmask = torch.zeros((len(batch), k), dtype=torch.float32)
    pgmask = torch.zeros((len(batch), k), dtype=torch.float32)
    old = torch.zeros((len(batch), k), dtype=torch.float32)
    ref = torch.zeros((len(batch), k), dtype=torch.float32)
    for b, e in enumerate(batch):
        seq = e.prompt_ids + e.completion_ids
        ids[b, width - len(seq):] = torch.tensor(seq)
        attn[b, width - len(seq):] = 1
        c = len(e.completion_ids)
        cmask[b, k - c:] = 1.0
        pgmask[b, k - c + min(e.pg_from, c):] = 1.0
        for frame, lps in ((old, e.old_logprobs), (ref, e.ref_logprobs)):
            if lps:
                lp = lps[:c]
                frame[b, k - len(lp):] = torch.tensor(lp)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "position_ids": pos,
        "completion_mask": cmask,
        "pg_mask": pgmask,  # the completion tokens from each example's pg_from on
        "old_logprobs": old,
        "ref_logprobs": ref,
        "advantage": torch.tensor([e.advantage for e in batch], dtype=torch.float32),
        "weight": torch.tensor([e.weight for e in batch], dtype=torch.float32),
    }


def completion_logprobs(model: Any, batch: dict[str, torch.Tensor], with_entropy: bool = False) -> Any:
    """Log-probs of the completion-frame tokens under ``model``: [B, K] (and, with
    ``with_entropy``, the policy's entropy at each of those positions, [B, K]).

    Only the last K+1 positions get logits (``logits_to_keep``): computing the vocabulary
    projection for prompt tokens would be wasted work, since the loss never reads it.
    """
    k = batch["completion_mask"].shape[1]
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        logits_to_keep=k + 1,
        use_cache=False,  # a training forward: a KV cache is never read (and breaks activation checkpointing)
    )
    logits = out.logits[:, :-1].float()  # positions T-K-1 .. T-2 predict tokens T-K .. T-1
    targets = batch["input_ids"][:, -k:]
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return lp
    return lp, -(logp.exp() * logp).sum(-1)


def prefix_cache_kwarg(model: Any) -> str | None:
    """The keyword a causal LM's forward takes a KV cache by, or None when ``model`` cannot run
    :func:`shared_prefix_logprobs`: attention other than sdpa or eager (a padded 2-D mask over
    cache and new tokens), or sliding windows (the checks of the backend's own decode loop)."""
    from e3orch.policy.backends.hf import cache_kwarg, full_attention_model

    return cache_kwarg(model) if full_attention_model(model) else None


def shared_prefix_logprobs(model: Any, batch: Sequence[Example], pad_id: int, device: Any, cache_kw: str,
                           with_entropy: bool = False) -> Any:
    """:func:`completion_logprobs` of ``collate(batch)``, computing each distinct prompt once.

    Siblings of a branch point answer one question, so a round's decisions share their prompts
    (a real round: 5,448 decisions, 3,084 distinct prompts, 41% of the prompt tokens repeated).
    The distinct prompts run once (left-padded, keeping their KV cache and the logits that
    predict each completion's first token); the cache rows are then selected per decision and
    the completions (right-padded) run on top of them. Gradients flow into the shared prompt
    computation from every decision that reads it, so the result and its gradient are those of
    the unshared forward (up to float rounding); the frame is collate's: [B, K], completions
    right-aligned."""
    from e3orch.policy.backends.hf import left_padded

    uniq: dict[tuple[int, ...], int] = {}
    row_prompt = [uniq.setdefault(tuple(e.prompt_ids), len(uniq)) for e in batch]
    ids, attn = left_padded(list(uniq), pad_id)
    attn = attn.to(device)
    out = model(input_ids=ids.to(device), attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
                use_cache=True, logits_to_keep=1)
    first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # [U, V]: each prompt's next-token distribution
    cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
    rows = torch.tensor(row_prompt, device=device)
    cache.batch_select_indices(rows)
    lens = torch.tensor([len(e.completion_ids) for e in batch], device=device)
    k = int(lens.max())
    cids = torch.full((len(batch), k), pad_id, dtype=torch.long)
    for b, e in enumerate(batch):
        cids[b, : len(e.completion_ids)] = torch.tensor(e.completion_ids)
    cids = cids.to(device)
    cols = torch.arange(k, device=device).unsqueeze(0)
    cattn = (cols < lens.unsqueeze(1)).long()
    out2 = model(input_ids=cids, attention_mask=torch.cat([attn[rows], cattn], 1),
                 position_ids=attn[rows].sum(1, keepdim=True) + cols, use_cache=False, **{cache_kw: cache})
    # left-aligned: column j predicts completion token j (from the prompt's last position for j = 0)
    logp = torch.cat([first[rows].unsqueeze(1), torch.log_softmax(out2.logits[:, :-1].float(), dim=-1)], 1)  # [B, K, V]
    lp = logp.gather(-1, cids.unsqueeze(-1)).squeeze(-1)
    # collate's frame: row b's completion ends at column K-1
    src = (cols - (k - lens).unsqueeze(1)).clamp(min=0)
    inside = cols >= (k - lens).unsqueeze(1)
    lp = torch.where(inside, lp.gather(1, src), torch.zeros_like(lp))
    if not with_entropy:
        return lp
    ent = -(logp.exp() * logp).sum(-1)
    return lp, torch.where(inside, ent.gather(1, src), torch.zeros_like(ent))
