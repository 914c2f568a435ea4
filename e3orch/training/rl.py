"""The RL objective: clipped policy gradient on decision tokens, KL to the warm start, entropy.

Shapes: every tensor in the completion frame is [B, K] (B decisions, K = longest completion in
the batch, left-aligned to the end of the sequence; see training/data.py).

Per decision the token losses are averaged; decisions are then weighted so that every rollout
tree counts equally (weight = 1 / decisions in its tree, normalised over the batch) — long
trajectories with many decisions do not dominate.

The KL term is the k3 estimate ``exp(d) - d - 1`` with ``d = log pi_ref - log pi``, clamped at
:data:`KL_TOKEN_MAX` per token (as verl's ``low_var_kl`` does). Its gradient grows like
``exp(d)``: a token the update pushes far below the warm start (e.g. a rare completion sampled
at a high rollout temperature with a negative advantage) made the whole step's gradient, and
after ``max_grad_norm`` clipping the whole step, about that one token — a round at lr 3e-4 and
rollout temperature 1.5 measured a mean token KL of 30.8. Clamped, such a token adds a constant
and no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_TOKEN_MAX = 10.0  # per-token cap of the k3 KL estimate (see the module docstring)
_LOG_RATIO_MAX = 20.0  # |d| cap before exp, so the cap above is reached without overflow


def k3_kl(ref_lp: torch.Tensor, new_lp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref), clamped at :data:`KL_TOKEN_MAX`; 0 off the mask."""
    d = torch.where(mask > 0, ref_lp - new_lp, torch.zeros_like(new_lp))
    d = torch.clamp(d, -_LOG_RATIO_MAX, _LOG_RATIO_MAX)
    return torch.clamp(torch.exp(d) - d - 1, max=KL_TOKEN_MAX)


@dataclass
class LossParts:
    loss: torch.Tensor
    pg: float
    kl: float
    entropy: float
    clip_frac: float
    ratio_mean: float


def without_stop_token(input_ids: torch.Tensor, completion_mask: torch.Tensor, stop_id: int) -> torch.Tensor:
    """``completion_mask`` [B, K] without each completion's final stop token (left-padded batches
    end every completion at the last column: training/data.py's ``collate``)."""
    out = completion_mask.clone()
    out[:, -1] = out[:, -1] * (input_ids[:, -1] != stop_id).to(out.dtype)
    return out


def clipped_pg_loss(
    new_lp: torch.Tensor,        # [B, K] log-probs under the current policy
    old_lp: torch.Tensor,        # [B, K] log-probs under the policy that sampled
    ref_lp: torch.Tensor | None,  # [B, K] log-probs under the warm-start policy
    advantage: torch.Tensor,     # [B]
    mask: torch.Tensor,          # [B, K] 1 on completion tokens
    weight: torch.Tensor,        # [B] per-decision weights (sum to 1 over the batch)
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,  # upper clip range (DAPO's clip-higher); None: clip_eps
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,  # [B, K] token entropies (optional bonus)
    entropy_coef: float = 0.0,
    pg_mask: torch.Tensor | None = None,  # [B, K] the tokens the policy gradient acts on; None: mask
) -> LossParts:
    """Per decision, the token terms averaged over ``mask``; ``pg_mask`` (None: ``mask``) names the
    tokens whose policy-gradient term counts (the others keep their KL and entropy terms)."""
    adv = advantage.unsqueeze(1)
    pgm = mask if pg_mask is None else pg_mask * mask
    log_ratio = (new_lp - old_lp) * mask
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + high) * adv
    pg_tok = -torch.minimum(unclipped, clipped) * pgm  # the 0/1 mask: each token's term or exactly 0
    kl_tok = k3_kl(ref_lp, new_lp, mask) if ref_lp is not None else None
    tok = pg_tok
    if kl_tok is not None and kl_coef > 0:
        tok = tok + kl_coef * kl_tok  # k3: unbiased, non-negative KL estimate
    if entropy is not None and entropy_coef > 0:
        tok = tok - entropy_coef * entropy
    n_tok = mask.sum(1).clamp(min=1)
    per_decision = (tok * mask).sum(1) / n_tok
    loss = (per_decision * weight).sum()
    with torch.no_grad():
        kl = float((kl_tok * mask).sum() / mask.sum().clamp(min=1)) if kl_tok is not None else 0.0
        ent = float((entropy * mask).sum() / mask.sum().clamp(min=1)) if entropy is not None else 0.0
        outside = (ratio < 1 - clip_eps) | (ratio > 1 + high)
        clip_frac = float((outside.float() * mask).sum() / mask.sum().clamp(min=1))
        pg = float((pg_tok.sum(1) / n_tok * weight).sum())
        ratio_mean = float((ratio * mask).sum() / mask.sum().clamp(min=1))
    return LossParts(loss, pg, kl, ent, clip_frac, ratio_mean)
