#!/usr/bin/env bash
# The default pipeline once per training seed, and the mean and spread of the results.
#   bash scripts/seeds.sh            # seeds 0 1 2
#   bash scripts/seeds.sh 3 4        # other seeds
#   REUSE_WARMSTART=1 bash scripts/seeds.sh   # keep each seed's existing warm start (after changing
#                                             # only RL or evaluation knobs): rollout → ... → evaluate only
#   BASE=other.yaml bash scripts/seeds.sh     # start from another params file than params.yaml, e.g.
#                                             # configs/params-spine.yaml (README, "The learned policy today")
#   OUT=runs/spine bash scripts/seeds.sh      # write into OUT/seed-N and OUT/seeds.md instead of runs/
#   SUMMARY_ONLY=1 bash scripts/seeds.sh 0 1 2   # only the summary of seeds already run (e.g. side by side,
#                                                # one `seeds.sh N` each, which each write a one-seed summary)
# Per seed N: params.yaml (or $BASE) with warmstart.seed, rollout.seed and train.seed set to N (the task
# split, the executors' randomness and evaluation stay those of params.yaml), then the stages of
# dvc.yaml — warm start → rollout → score → train → evaluate-all — into $OUT/seed-N/ (OUT=runs unless
# set; its own models, checkpoints and reports). With the same torch threads, seed 0 is `make run`.
# `prepare` runs first if data/tasks is missing. The summary (means, spreads and each seed's training
# targets: e3orch/evaluation/targets.py) goes to $OUT/seeds.md and stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
E3=${E3:-.venv/bin/e3orch}
PY=${PY:-.venv/bin/python}
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(0 1 2)
OUT=${OUT:-runs}
export E3ORCH_TRACKING=${E3ORCH_TRACKING:-0}
if [ "${SUMMARY_ONLY:-0}" = 1 ]; then
  for s in "${SEEDS[@]}"; do
    [ -f "$OUT/seed-$s/reports/metrics.json" ] || { echo "seeds.sh: no $OUT/seed-$s/reports/metrics.json: run seed $s first" >&2; exit 2; }
  done
  SEEDS_TO_RUN=()
else
  SEEDS_TO_RUN=("${SEEDS[@]}")
  [ -f data/tasks/sim_train.parquet ] || "$E3" prepare
fi
for s in "${SEEDS_TO_RUN[@]}"; do
  d=$OUT/seed-$s; mkdir -p "$d"
  "$PY" - "$d" "$s" "${BASE:-params.yaml}" <<'PY'
import sys
from pathlib import Path
import yaml
from e3orch.config import read_params_file
d, s, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
p = read_params_file(base)  # its base: chain resolved (configs/params-spine.yaml names params.yaml)
for section in ("policy", "warmstart", "rollout", "train", "evaluate"):
    p.setdefault(section, {})
p["policy"]["init_dir"] = f"{d}/models/init"
p["warmstart"].update(seed=s, out_dir=f"{d}/models/warmstart")
p["rollout"].update(seed=s, out_dir=f"{d}/data/rollouts")
p["train"].update(seed=s, out_dir=f"{d}/models/policy", checkpoint_dir=f"{d}/models/checkpoints")
p["evaluate"]["out_dir"] = f"{d}/reports"
Path(d, "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
PY
  echo "=== seed $s"
  t0=$(date +%s)
  if [ "${REUSE_WARMSTART:-0}" = 1 ] && [ -f "$d/models/warmstart/config.json" ]; then
    echo "reusing $d/models/warmstart"
  else
    "$E3" warmstart --params "$d/params.yaml" --metrics "$d/warmstart.json"
  fi
  # the stages of dvc.yaml: round 1's rollout and scoring, then RL from them (with two threads seed 0 is `make run`'s run)
  "$E3" rollout --params "$d/params.yaml" --policy "$d/models/warmstart" --out "$d/data/rollouts"
  "$E3" score --params "$d/params.yaml" --rollouts "$d/data/rollouts" --out "$d/data/scored.parquet" --summary "$d/score.json"
  "$E3" train --params "$d/params.yaml" --init "$d/models/warmstart" --scored "$d/data/scored.parquet" \
    --leaves "$d/data/rollouts/leaves.parquet" --no-resume --metrics "$d/train_rounds.json"
  "$E3" evaluate-all --params "$d/params.yaml" --policy "$d/models/policy" --warmstart "$d/models/warmstart" --out "$d/reports"
  echo "=== seed $s: $(( $(date +%s) - t0 )) s"
done
"$PY" - "$OUT" "${SEEDS[@]}" <<'PY' | tee "$OUT/seeds.md"
import json, statistics, sys
from pathlib import Path
out, *seeds = sys.argv[1:]
runs = {s: json.loads(Path(f"{out}/seed-{s}/reports/metrics.json").read_text()) for s in seeds}
print(f"Seeds {', '.join(seeds)}: mean ± standard deviation (population) over seeds; eval split.\n")
def table(run, pool):
    return run["systems"] if pool == "default" else run.get(pool, {}).get("systems", {})
for pool in ("default", "transfer", "generated"):  # generated: every generated pool's episodes together
    print(f"| {pool} pool | accuracy | cost/task | IE |\n|---|---|---|---|")
    for name in table(runs[seeds[0]], pool):  # every evaluated system, in the report's order
        rows = [table(runs[s], pool)[name] for s in seeds if name in table(runs[s], pool)]
        if not rows:
            continue
        cells = []
        for m in ("accuracy", "cost", "ie"):
            v = [r[m] for r in rows]
            cells.append(f"{statistics.fmean(v):.3f} ± {statistics.pstdev(v):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
pools = [p for p in ("default", "transfer", "generated") if table(runs[seeds[0]], p)]
print("Per seed, e3orch vs its warm start (accuracy / cost / IE):\n")
print("| seed | " + " | ".join(f"{p} pool" for p in pools) + " |\n|---|" + "---|" * len(pools))
def cell(m):
    return f"{m['accuracy']:.3f} / {m['cost']:.3f} / {m['ie']:.3f}" if m else "-"
for s in seeds:
    print(f"| {s} | " + " | ".join(f"{cell(table(runs[s], p).get('e3orch'))} vs {cell(table(runs[s], p).get('warmstart'))}"
                                   for p in pools) + " |")
from e3orch.evaluation.targets import TARGETS, judge, verdict
print("\nTraining targets per seed (e3orch/evaluation/targets.py):\n")
print("| seed | beats its warm start | default pool | transfer pool | generated pools | met |\n|---|---|---|---|---|---|")
met = judged = 0
for s in seeds:
    t = judge(runs[s])
    marks = [verdict(t.get(k, {}).get("ok")) for k in TARGETS]
    met, judged = met + t["met"], judged + t["judged"]
    print(f"| {s} | " + " | ".join(marks) + f" | {t['met']} of {t['judged']} |")
print(f"\n{met} of {judged} per-seed targets met.")
PY
