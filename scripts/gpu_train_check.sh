#!/usr/bin/env bash
# GPU check of the *training* path without vLLM: the transformers backend and Accelerate on CUDA.
#   1. the machine: nvidia-smi -L, torch / transformers / accelerate versions;
#   2. `e3orch bench train --json` with the policy on cuda, bf16 autocast and fp32;
#   3. a short real pipeline on the GPU: prepare -> warmstart -> train (2 RL rounds) through
#      `accelerate launch` with configs/accelerate/ddp_gpu.yaml, then fsdp_gpu.yaml, one process each.
# Every stage's seconds and metrics go to $OUT (default ./gpu-results), at most 8 flat files:
#   env.txt log.txt gpu_util.csv bench_train.json warmstart.json train_ddp.json train_fsdp.json summary.json
# Nothing is written under data/, models/ or reports/: params, data and models live in a scratch
# folder ($WORK, default a fresh mktemp -d), with params.yaml's keys overridden there. The bench
# uses the pipeline's warm start models/warmstart when it is there (carry it, so the figures
# compare with docs/benchmarks.md's CPU rows), else the warm start trained here.
#
# Knobs (environment):
#   PY=python3                      the interpreter (the repo root is put on PYTHONPATH)
#   E3ORCH_GPU_CHECK_DEVICE=cuda    cuda (fails at once without CUDA) | cpu (a local dry run)
#   E3ORCH_GPU_CHECK_SIZE=gpu       gpu | tiny (default tiny when DEVICE=cpu)
# Packages: the repo is used in place (put on PYTHONPATH, not installed); the commands import torch,
# transformers, accelerate, tokenizers, safetensors, numpy, pyyaml, rich, polars, pandera and
# pydantic (never mlflow, prefect or dvc). On a host without network, bring the missing ones as
# wheels: `pip install --no-index --no-deps --target /tmp/site *.whl` there, then
# `export PYTHONPATH=/tmp/site` before running this script.
# Local dry run on a CPU machine:
#   E3ORCH_GPU_CHECK_DEVICE=cpu PY=.venv/bin/python bash scripts/gpu_train_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-gpu-results}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PY=${PY:-python3}
DEVICE=${E3ORCH_GPU_CHECK_DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then SIZE=${E3ORCH_GPU_CHECK_SIZE:-tiny}; else SIZE=${E3ORCH_GPU_CHECK_SIZE:-gpu}; fi
WORK=${WORK:-$(mktemp -d)}; mkdir -p "$WORK"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export E3ORCH_TRACKING=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 MPLBACKEND=Agg
LOG=$OUT/log.txt; : > "$LOG"
exec > >(tee -a "$LOG") 2>&1

case "$DEVICE" in
  cuda)
    if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
      echo "FATAL: CUDA is not available to $PY (torch sees no GPU). This check is for a GPU machine;" >&2
      echo "       for a local dry run set E3ORCH_GPU_CHECK_DEVICE=cpu." >&2
      exit 3
    fi
    ACC_DDP=(--config_file configs/accelerate/ddp_gpu.yaml --num_processes 1)
    ACC_FSDP=(--config_file configs/accelerate/fsdp_gpu.yaml --num_processes 1)
    BENCH_MP=(bf16 fp32) ;;
  cpu)
    # The same configs' code paths as far as a CPU allows: gloo DDP with one process; the FSDP
    # config with --cpu (Accelerate then runs it without sharding). No bf16 on CPU (slow, not the point).
    ACC_DDP=(--config_file configs/accelerate/ddp_cpu.yaml --num_processes 1)
    ACC_FSDP=(--config_file configs/accelerate/fsdp_gpu.yaml --num_processes 1 --cpu --mixed_precision no)
    BENCH_MP=(fp32) ;;
  *) echo "FATAL: E3ORCH_GPU_CHECK_DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2 ;;
esac

{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -m)  device: $DEVICE  size: $SIZE  work: $WORK"
  command -v nvidia-smi >/dev/null && nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no nvidia-smi"
  "$PY" - <<'PY'
import platform, sys, torch, transformers, accelerate, tokenizers, polars, pydantic, pandera
print("python", sys.version.split()[0], platform.machine())
for m in (torch, transformers, accelerate, tokenizers, polars, pydantic, pandera):
    print(m.__name__, m.__version__)
print("cuda available", torch.cuda.is_available(), "| torch.version.cuda", torch.version.cuda,
      "| bf16", torch.cuda.is_available() and torch.cuda.is_bf16_supported())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
PY
} | tee "$OUT/env.txt"

GPU_MON=""
if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 > "$OUT/gpu_util.csv" 2>/dev/null &
  GPU_MON=$!
fi
trap '[ -n "$GPU_MON" ] && kill "$GPU_MON" 2>/dev/null || true' EXIT

# -- a params file: params.yaml with scratch paths and small sizes ---------------------------
BENCH_POLICY=$WORK/models/warmstart
[ -f models/warmstart/config.json ] && BENCH_POLICY=$ROOT/models/warmstart
"$PY" - "$WORK" "$DEVICE" "$SIZE" "$BENCH_POLICY" <<'PY'
import copy, sys, yaml
from pathlib import Path
work, device, size, bench_policy = sys.argv[1:5]
p = yaml.safe_load(Path("params.yaml").read_text()) or {}
small = {
    #          prepare/domain  warm-start tasks, epochs  tasks per RL round
    "gpu":  dict(train=100, eval=5, ws_tasks=600, ws_epochs=2.0, tasks_per_round=16),
    "tiny": dict(train=12, eval=2, ws_tasks=40, ws_epochs=0.3, tasks_per_round=4),
}[size]
over = {
    "prepare": {"train_per_domain": small["train"], "eval_per_domain": small["eval"], "out_dir": f"{work}/data/tasks"},
    "policy": {"init_dir": f"{work}/models/init", "backend": "transformers", "device": device, "dtype": "auto"},
    "warmstart": {"tasks": small["ws_tasks"], "epochs": small["ws_epochs"], "out_dir": f"{work}/models/warmstart"},
    "rollout": {"tasks_per_round": small["tasks_per_round"], "out_dir": f"{work}/data/rollouts"},
    # no cost ceiling: it restores each process's whole weights, which the FSDP leg shards
    "train": {"rounds": 2, "hold_cost": None, "checkpoint_dir": f"{work}/models/checkpoints", "out_dir": f"{work}/models/policy"},
    "evaluate": {"out_dir": f"{work}/reports"},
}
for section, keys in over.items():
    p.setdefault(section, {}).update(keys)
Path(work, "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
b = copy.deepcopy(p)
b["warmstart"]["out_dir"] = bench_policy
Path(work, "params-bench.yaml").write_text(yaml.safe_dump(b, sort_keys=False))
PY
P=$WORK/params.yaml
E3=("$PY" -m e3orch.cli)
LAUNCH=("$PY" -m accelerate.commands.launch)

declare -A SECS RC; ORDER=()
now() { date +%s.%N; }
# leg NAME CMD...: run, time, keep going; the rc lands in summary.json
leg() {
  local name=$1; shift
  echo; echo "=== $name: $*"
  local t0; t0=$(now)
  set +e; "$@"; local rc=$?; set -e
  SECS[$name]=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'); RC[$name]=$rc; ORDER+=("$name")
  echo "=== $name: rc=$rc in ${SECS[$name]} s"
  summary  # after every leg, so a run cut short still leaves its figures
  return 0
}
need() { [ "${RC[$1]}" = 0 ] || { echo "FATAL: $1 failed (rc ${RC[$1]}); see $LOG" >&2; exit 1; }; }
summary() {  # $OUT/summary.json: each leg's seconds and rc, and the headline figures
  local legs="" k
  for k in "${ORDER[@]}"; do legs+="$k=${SECS[$k]}:${RC[$k]} "; done
  "$PY" - "$OUT" "$DEVICE" "$SIZE" "$legs" "$BENCH_POLICY" <<'PY' > "$OUT/summary.json"
import json, sys
from pathlib import Path
out, device, size, legs, bench_policy = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5]
def load(name):
    f = out / name
    try:
        return json.loads(f.read_text()) if f.exists() else None
    except ValueError:
        return None
s = {"device": device, "size": size,
     "legs": {k: {"seconds": round(float(v.split(":")[0]), 1), "rc": int(v.split(":")[1])}
              for k, v in (x.split("=", 1) for x in legs)}}
bench = load("bench_train.json") or {}
keys = ("update_tokens_per_s", "reference_tokens_per_s", "update_over_reference", "completion_tokens_per_s",
        "long_completion_tokens_per_s", "phase_generate_s", "phase_update_s")
s["bench_train"] = {mp: {k: r.get(k) for k in keys} for mp, r in bench.items() if isinstance(r, dict)}
s["bench_policy"] = bench_policy
ws = load("warmstart.json")
if ws:
    s["warmstart"] = {k: ws.get(k) for k in ("demonstrations", "steps", "skipped_steps", "final_loss", "tokens", "seconds")}
for leg in ("ddp", "fsdp"):
    rounds = load(f"train_{leg}.json")
    if rounds:
        s[f"train_{leg}"] = [{k: r.get(k) for k in ("round", "accuracy", "reward", "kl", "n_decisions",
                              "generated_tokens", "update_tokens", "time_generate_s", "time_update_s",
                              "completion_tokens_per_s", "update_tokens_per_s", "skipped_steps")} for r in rounds]
print(json.dumps(s, indent=1))
PY
}

# -- the pipeline's data and warm start -------------------------------------------------------
leg prepare "${E3[@]}" prepare --params "$P"
need prepare
leg warmstart "${LAUNCH[@]}" "${ACC_DDP[@]}" -m e3orch.cli warmstart --params "$P" --metrics "$OUT/warmstart.json"
need warmstart

# -- bench train on $BENCH_POLICY: plain python, so Accelerator() takes its precision from
# ACCELERATE_MIXED_PRECISION (bf16 autocast; fp32, where update_over_reference compares
# like with like: the reference loop runs without autocast). Results merge into bench_train.json.
QUICK=(); [ "$SIZE" = tiny ] && QUICK=(--quick)
bench() {  # bench bf16|fp32
  local rc=0 mp=$1; [ "$mp" = fp32 ] && mp=no
  ACCELERATE_MIXED_PRECISION=$mp "${E3[@]}" bench train --params "$WORK/params-bench.yaml" --json "${QUICK[@]}" \
      > "$WORK/bench_$1.json" || rc=$?
  cat "$WORK/bench_$1.json"
  "$PY" - "$WORK/bench_$1.json" "$OUT/bench_train.json" "$1" <<'PY'
import json, sys
from pathlib import Path
src, dst, key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
res = json.loads(dst.read_text()) if dst.exists() else {}
try:
    res[key] = json.loads(src.read_text())
except ValueError as exc:
    res[key] = {"error": f"no JSON from bench train: {exc}"}
dst.write_text(json.dumps(res, indent=2) + "\n")
PY
  return $rc
}
train() {  # train ddp|fsdp: 2 RL rounds from the fresh warm start, one process
  local acc=("${ACC_DDP[@]}"); [ "$1" = fsdp ] && acc=("${ACC_FSDP[@]}")
  "${LAUNCH[@]}" "${acc[@]}" -m e3orch.cli train --params "$P" --no-resume \
      --out "$WORK/models/policy-$1" --metrics "$OUT/train_$1.json"
}
# Most telling first, so a run cut short still brings back the main figures.
leg "bench_${BENCH_MP[0]}" bench "${BENCH_MP[0]}"
leg train_ddp train ddp
leg train_fsdp train fsdp
for mp in "${BENCH_MP[@]:1}"; do leg "bench_$mp" bench "$mp"; done

echo; echo "=== summary"
cat "$OUT/summary.json"
failed=""
for k in "${!RC[@]}"; do [ "${RC[$k]}" = 0 ] || failed+=" $k(rc ${RC[$k]})"; done
if [ -n "$failed" ]; then echo "FAILED legs:$failed (see $LOG)" >&2; exit 1; fi
echo "all legs passed ($DEVICE, $SIZE); results in $OUT"
