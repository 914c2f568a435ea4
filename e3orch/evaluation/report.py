"""Reports: the systems table (Markdown / terminal) and, later, plots."""

from __future__ import annotations

from typing import Any


def render_table(systems: dict[str, dict[str, Any]], *, markdown: bool = False) -> str:
    """A fixed-width (or Markdown) table of accuracy, cost, IE and makespan per system."""
    header = ["system", "accuracy", "cost/task", "IE (acc/cost)", "makespan s", "serial s", "n"]
    rows = [
        [name, f"{m['accuracy']:.3f}", f"{m['cost']:.3f}", f"{m['ie']:.3f}",
         f"{m['makespan_s']:.2f}", f"{m.get('serial_latency_s', 0.0):.2f}", str(m["n"])]
        for name, m in sorted(systems.items(), key=lambda kv: -kv[1]["accuracy"])
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), *(fmt.format(*r) for r in rows)])
