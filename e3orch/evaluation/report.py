"""Reports: the systems table (Markdown / terminal) and, later, plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e3orch.config import HANDWRITTEN


def render_table(systems: dict[str, dict[str, Any]], *, markdown: bool = False) -> str:
    """A fixed-width (or Markdown) table of accuracy, cost, IE, makespan, defects and episodes that
    ended without an answer (a budget ran out: e.g. a policy re-planning a part the engine refuses)."""
    header = ["system", "accuracy", "cost/task", "IE (acc/cost)", "makespan s", "serial s", "defects/ep", "no answer", "n"]
    rows = [
        [name, f"{m['accuracy']:.3f}", f"{m['cost']:.3f}", f"{m['ie']:.3f}",
         f"{m['makespan_s']:.2f}", f"{m.get('serial_latency_s', 0.0):.2f}",
         f"{m.get('defects_per_episode', 0.0):.2f}", str(m.get("budget_failures", 0)), str(m["n"])]
        for name, m in sorted(systems.items(), key=lambda kv: -kv[1]["accuracy"])
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), *(fmt.format(*r) for r in rows)])


def pareto_front(systems: dict[str, dict[str, Any]]) -> list[str]:
    """Systems not dominated on (higher accuracy, lower cost)."""
    front = []
    for name, m in systems.items():
        dominated = any(
            o["accuracy"] >= m["accuracy"] and o["cost"] <= m["cost"] and (o["accuracy"] > m["accuracy"] or o["cost"] < m["cost"])
            for other, o in systems.items() if other != name
        )
        if not dominated:
            front.append(name)
    return sorted(front, key=lambda n: systems[n]["cost"])


def plot_pareto(systems: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    front = pareto_front(systems)
    for name, m in systems.items():
        learned = not (name in HANDWRITTEN or name.startswith("single:"))
        ax.scatter(m["cost"], m["accuracy"], s=60 if learned else 30, marker="*" if learned else "o",
                   color="tab:red" if learned else ("tab:blue" if name in front else "tab:gray"), zorder=3)
        ax.annotate(name, (m["cost"], m["accuracy"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    pts = sorted((systems[n]["cost"], systems[n]["accuracy"]) for n in front)
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", color="tab:blue", alpha=0.5, zorder=2)
    ax.set_xscale("symlog", linthresh=0.05)
    ax.set_xlabel("mean cost per task (pool cost units, symlog)")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_training(rounds: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    xs = [r["round"] for r in rounds]
    for ax, keys, title in (
        (axes[0], ("accuracy",), "leaf accuracy"),
        (axes[1], ("cost",), "leaf cost"),
        (axes[2], ("reward", "kl"), "reward / KL"),
    ):
        for k in keys:
            ax.plot(xs, [r[k] for r in rounds], marker="o", label=k)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(metrics: dict[str, Any], out: Path, rounds_path: Path | None = None) -> Path:
    """reports/report.md with the systems table, per-domain table, Pareto plots and curves."""
    import json

    out = Path(out)
    plot_pareto(metrics["systems"], out / "pareto.png", "accuracy vs cost (default pool, eval split)")
    lines = ["# E³-Orch evaluation report", "",
             f"Eval split, {metrics.get('config', {}).get('n_tasks', '?')} tasks. IE = accuracy ÷ mean cost per task.", "",
             "## Systems (default pool)", "", render_table(metrics["systems"], markdown=True), "",
             f"Pareto front (accuracy vs cost): {', '.join(pareto_front(metrics['systems']))}", "",
             "![pareto](pareto.png)", ""]
    targets = metrics.get("targets") or {}
    if targets.get("judged"):
        from e3orch.evaluation.targets import describe

        lines += [f"## Training targets: {targets['met']} of {targets['judged']} met", "",
                  "`e3orch` against its warm start and the hand-written orchestrators (single executors set no bar; "
                  "`e3orch/evaluation/targets.py`).", "",
                  "| target | met | figures |", "|---|---|---|"]
        lines += [f"| {name} | {verdict} | {figures} |" for name, verdict, figures in describe(targets)]
        lines.append("")
    if "transfer" in metrics:
        plot_pareto(metrics["transfer"]["systems"], out / "pareto_transfer.png", "accuracy vs cost (transfer pool)")
        lines += ["## Transfer pool (never seen in training)", "",
                  render_table(metrics["transfer"]["systems"], markdown=True), "", "![pareto transfer](pareto_transfer.png)", ""]
    if "generated" in metrics:
        gen = metrics["generated"]
        lines += [f"## Generated pools (never seen in any form): {len(gen['pools'])} pools, all episodes together", "",
                  render_table(gen["systems"], markdown=True), "",
                  "Per pool (accuracy / cost / IE; pool files in `generated_pools/`):", "",
                  "| system | " + " | ".join(f"pool {p['seed']}" for p in gen["pools"]) + " |",
                  "|---|" + "---|" * len(gen["pools"])]
        for name in gen["systems"]:
            cells = [f"{p['systems'][name]['accuracy']:.3f} / {p['systems'][name]['cost']:.3f} / {p['systems'][name]['ie']:.3f}"
                     if name in p["systems"] else "-" for p in gen["pools"]]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    per = metrics.get("per_benchmark", {})
    if per:
        systems = [s for s in metrics["systems"] if not s.startswith("single:")]
        lines += ["## Accuracy / cost per domain", "", "| domain | " + " | ".join(systems) + " |",
                  "|---|" + "---|" * len(systems)]
        for bench, row in per.items():
            cells = [f"{row[s]['accuracy']:.2f} / {row[s]['cost']:.2f}" if s in row else "-" for s in systems]
            lines.append(f"| {bench} | " + " | ".join(cells) + " |")
        lines.append("")
    rp = rounds_path or out / "train_rounds.json"
    if rp.exists():
        rounds = json.loads(rp.read_text())
        if rounds:
            plot_training(rounds, out / "training_curves.png")
            lines += ["## Training curves", "", "![training](training_curves.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
