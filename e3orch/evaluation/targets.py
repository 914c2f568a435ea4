"""The learned policy's training targets, judged from one evaluation's ``metrics.json``.

Four per run, each with the figures it was judged on (``e3orch`` is the trained policy,
``warmstart`` its warm start; the *rules* are the hand-written orchestrators of
:data:`~e3orch.config.HANDWRITTEN` that were evaluated — single executors are systems of the
table but not orchestrators, so they set no bar):

* ``beats_warmstart`` — more accurate than the warm start, or as accurate within one point with at
  least 1.16× its intelligence efficiency (IE = accuracy ÷ cost per task);
* ``default_pool`` — on the training pool no system is both more accurate and cheaper, and the IE
  is at least 1.16× that of every rule whose accuracy is within 3 points of it or above;
* ``transfer_pool`` — on the transfer pool, an IE above every rule's;
* ``generated_pools`` — on the generated pools (their episodes together), an IE above every rule's.

``scripts/seeds.sh`` prints them per seed; ``reports/report.md`` has them as a table.
"""

from __future__ import annotations

from typing import Any

from e3orch.config import HANDWRITTEN

IE_FACTOR = 1.16      # IE multiple over the warm start (at equal accuracy) and over the nearby rules
EQUAL_ACCURACY = 0.01  # "equal accuracy": within one point
RULE_WINDOW = 0.03     # rules within 3 points of the policy's accuracy, or above it, set the IE bar
EPS = 1e-9             # accuracies are fractions of the task count: compare them with a little slack

TARGETS = ("beats_warmstart", "default_pool", "transfer_pool", "generated_pools")


def _rules(systems: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: m for name, m in systems.items() if name in HANDWRITTEN}


def _above_every_rule(systems: dict[str, dict[str, Any]], policy: str) -> dict[str, Any]:
    rules = _rules(systems)
    if policy not in systems or not rules:
        return {"ok": None, "why": f"no {policy} or no hand-written orchestrator evaluated on this pool"}
    best = max(rules, key=lambda n: rules[n]["ie"])
    ie = systems[policy]["ie"]
    return {"ok": ie > rules[best]["ie"], "ie": ie, "best_rule": best, "best_rule_ie": rules[best]["ie"]}


def judge(metrics: dict[str, Any], policy: str = "e3orch", reference: str = "warmstart") -> dict[str, Any]:
    """The four targets of ``policy`` in ``metrics`` (``metrics.json``'s shape): ``{target: {"ok":
    True | False | None, ...figures}}`` plus ``"met"`` (how many are True) and ``"judged"`` (how many
    could be judged; ``None`` where a system or pool is missing)."""
    systems = metrics.get("systems", {})
    out: dict[str, Any] = {}
    if policy not in systems:
        return {"met": 0, "judged": 0, "why": f"no {policy} in the evaluation"}
    me = systems[policy]
    if reference in systems:
        ref = systems[reference]
        gain = me["accuracy"] - ref["accuracy"]
        ratio = me["ie"] / ref["ie"] if ref["ie"] > 0 else None  # None: a warm start with no IE to compare
        ok = gain > EPS or (abs(gain) <= EQUAL_ACCURACY + EPS and (ratio is None and me["ie"] > 0
                                                                  or ratio is not None and ratio >= IE_FACTOR - EPS))
        out["beats_warmstart"] = {"ok": ok, "accuracy_gain": round(gain, 6),
                                  "ie_ratio": None if ratio is None else round(ratio, 6)}
    else:
        out["beats_warmstart"] = {"ok": None, "why": f"no {reference} in the evaluation"}
    dominated_by = sorted(n for n, m in systems.items()
                          if n != policy and m["accuracy"] > me["accuracy"] + EPS and m["cost"] < me["cost"] - EPS)
    near = {n: m for n, m in _rules(systems).items() if m["accuracy"] >= me["accuracy"] - RULE_WINDOW - EPS}
    bar = IE_FACTOR * max((m["ie"] for m in near.values()), default=0.0)
    out["default_pool"] = {"ok": not dominated_by and me["ie"] >= bar - EPS, "dominated_by": dominated_by,
                           "ie": me["ie"], "ie_bar": round(bar, 6), "rules_in_window": sorted(near)}
    out["transfer_pool"] = _above_every_rule(metrics.get("transfer", {}).get("systems", {}), policy)
    out["generated_pools"] = _above_every_rule(metrics.get("generated", {}).get("systems", {}), policy)
    judged = [out[t]["ok"] for t in TARGETS if out[t]["ok"] is not None]
    return {**out, "met": sum(judged), "judged": len(judged)}


def _pair(a: float, b: float) -> tuple[str, str]:
    """Two IEs at 3 decimals, or at 4 where 3 would print them equal."""
    digits = 3 if f"{a:.3f}" != f"{b:.3f}" else 4
    return f"{a:.{digits}f}", f"{b:.{digits}f}"


def verdict(ok: bool | None) -> str:
    """A target's ``ok`` in words: yes, no, or n/a (not judged)."""
    return "n/a" if ok is None else ("yes" if ok else "no")


def describe(targets: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, verdict, figures) rows for a report or a terminal line."""
    if "why" in targets and not targets.get("judged"):
        return []
    rows = []
    b = targets["beats_warmstart"]
    if b["ok"] is None:
        rows.append(("beats its warm start", verdict(None), b["why"]))
    else:
        ratio = "the warm start has none" if b["ie_ratio"] is None else f"{b['ie_ratio']:.2f}× the warm start's"
        rows.append(("beats its warm start", verdict(b["ok"]), f"accuracy {b['accuracy_gain'] * 100:+.1f} points, IE {ratio}"))
    d = targets["default_pool"]
    window = ", ".join(d["rules_in_window"]) or "none"
    ie, bar = _pair(d["ie"], d["ie_bar"])
    rows.append(("default pool: non-dominated, IE bar", verdict(d["ok"]),
                 f"dominated by {', '.join(d['dominated_by']) or 'nothing'}; IE {ie} against "
                 f"{bar} (1.16 × the best IE of the rules within 3 points or above: {window})"))
    for key, label in (("transfer_pool", "transfer pool: IE above every rule"),
                       ("generated_pools", "generated pools: IE above every rule")):
        t = targets[key]
        if t["ok"] is None:
            rows.append((label, verdict(None), t["why"]))
            continue
        ie, best = _pair(t["ie"], t["best_rule_ie"])
        rows.append((label, verdict(t["ok"]), f"IE {ie} against {t['best_rule']}'s {best}"))
    return rows
