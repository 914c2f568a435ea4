#!/usr/bin/env bash
# GPU checks, one prepared script (a GPU host with this repo and a built .venv):
#   1. vLLM in its own environment, serving the warm-start policy;
#   2. transformers vs vLLM tokens/s on the same model and prompts, and the weight-sync time;
#   3. one short RL round on the GPU with the vLLM backend (generation tokens/s, sync time).
# Figures go to $OUT (or ./gpu-results) as JSON; copy them into docs/benchmarks.md with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}; mkdir -p "$OUT"
MODEL=${MODEL:-models/warmstart}
PORT=${PORT:-8100}
test -d "$MODEL" || .venv/bin/e3orch warmstart
make vllm-env
# the server serves a copy: the RL round writes its weights into the served folder
SERVE="$OUT/vllm-serve"; rm -rf "$SERVE"; cp -r "$MODEL" "$SERVE"
VLLM_SERVER_DEV_MODE=1 .vllm-venv/bin/vllm serve "$SERVE" --port "$PORT" --dtype bfloat16 \
    --gpu-memory-utilization 0.5 --enforce-eager > "$OUT/vllm.log" 2>&1 &
VLLM_PID=$!
trap 'kill $VLLM_PID 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "localhost:$PORT/v1/models" >/dev/null && break; sleep 2; done
.venv/bin/python - "$SERVE" "http://localhost:$PORT/v1" > "$OUT/backends.json" <<'PY'
import json, sys
from e3orch.config import load_params
from e3orch.benchmarks.backends import bench_backends
print(json.dumps(bench_backends(sys.argv[1], sys.argv[2], load_params()), indent=2))
PY
cat "$OUT/backends.json"
.venv/bin/e3orch train --init "$MODEL" --no-resume --out "$OUT/policy-gpu" --metrics "$OUT/gpu_round.json" \
    --params <(sed -e 's/^  backend: transformers/  backend: vllm/' -e 's/^  rounds: .*/  rounds: 1/' \
                   -e "s|^  vllm_model_dir: .*|  vllm_model_dir: $SERVE|" params.yaml) || true
cat "$OUT/gpu_round.json" 2>/dev/null || true
