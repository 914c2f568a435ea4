"""The RL objective: clipped policy gradient on decision tokens, KL to the warm start, entropy.

Shapes: every tensor in the completion frame is [B, K] (B decisions, K = longest completion in
the batch, left-aligned to the end of the sequence; see training/data.py).

Per decision the token losses are averaged; decisions are then weighted so that every rollout
tree counts equally (weight = 1 / decisions in its tree, normalised over the batch) — long
trajectories with many decisions do not dominate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossParts:
    loss: torch.Tensor
    pg: float
    kl: float
    entropy: float
    clip_frac: float
    ratio_mean: float


def clipped_pg_loss(
    new_lp: torch.Tensor,        # [B, K] log-probs under the current policy
    old_lp: torch.Tensor,        # [B, K] log-probs under the policy that sampled
    ref_lp: torch.Tensor | None,  # [B, K] log-probs under the warm-start policy
    advantage: torch.Tensor,     # [B]
    mask: torch.Tensor,          # [B, K] 1 on completion tokens
    weight: torch.Tensor,        # [B] per-decision weights (sum to 1 over the batch)
    *,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,  # [B, K] token entropies (optional bonus)
    entropy_coef: float = 0.0,
) -> LossParts:
    adv = advantage.unsqueeze(1)
    log_ratio = (new_lp - old_lp) * mask
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    tok = -torch.minimum(unclipped, clipped)
    if ref_lp is not None and kl_coef > 0:
        d = (ref_lp - new_lp) * mask
        tok = tok + kl_coef * (torch.exp(d) - d - 1)  # k3: unbiased, non-negative KL estimate
    if entropy is not None and entropy_coef > 0:
        tok = tok - entropy_coef * entropy
    n_tok = mask.sum(1).clamp(min=1)
    per_decision = (tok * mask).sum(1) / n_tok
    loss = (per_decision * weight).sum()
    with torch.no_grad():
        kl = 0.0
        if ref_lp is not None:
            d = (ref_lp - new_lp) * mask
            kl = float(((torch.exp(d) - d - 1) * mask).sum() / mask.sum().clamp(min=1))
        ent = float((entropy * mask).sum() / mask.sum().clamp(min=1)) if entropy is not None else 0.0
        clip_frac = float((((ratio - 1).abs() > clip_eps).float() * mask).sum() / mask.sum().clamp(min=1))
        pg = float(((-torch.minimum(unclipped, clipped) * mask).sum(1) / n_tok * weight).sum())
        ratio_mean = float((ratio * mask).sum() / mask.sum().clamp(min=1))
    return LossParts(loss, pg, kl, ent, clip_frac, ratio_mean)
