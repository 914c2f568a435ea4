"""One guarded optimizer step, shared by the warm start and the RL trainer.

A non-finite gradient (an overflow in reduced precision, one bad batch) would turn every weight
into NaN at the next ``opt.step()`` and silently ruin the rest of the run. The step is skipped
instead, as mixed-precision loss scalers do, and the caller counts the skips. The gradient norm
is computed after the all-reduce, so every process skips the same steps and stays in sync.
"""

from __future__ import annotations

import logging
import math
from typing import Any

log = logging.getLogger(__name__)


def finite_step(accelerator: Any, model: Any, opt: Any, sched: Any, max_grad_norm: float) -> bool:
    """Clip, then step ``opt`` and ``sched`` only if the gradient norm is finite; zero the
    gradients either way. Returns whether the step was taken."""
    norm = accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    ok = norm is None or math.isfinite(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
    if ok:
        opt.step()
        sched.step()
    else:
        log.warning("non-finite gradient norm (%s): optimizer step skipped", norm)
    opt.zero_grad(set_to_none=True)
    return ok
