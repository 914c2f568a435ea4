"""Backends: the transformers backend's log-probs agree with scoring; vLLM needs a GPU server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import write_tiny_params

from e3orch.config import load_params
from e3orch.policy.backends.base import make_backend
from e3orch.policy.backends.hf import MIN_SHARED_PREFIX, prefix_groups
from e3orch.policy.model import create_default_policy


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("backend")
    params = load_params(write_tiny_params(root))
    return create_default_policy(params, root / "init")


def test_default_policy_is_moved_in_whole_with_config_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # config.json marks "a policy is here" (warm start, the trainer): it is moved in after every other file
    moved: list[str] = []
    real_replace = Path.replace

    def replace(self: Path, target: str | os.PathLike[str]) -> Path:
        moved.append(self.name)
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    out = create_default_policy(load_params(write_tiny_params(tmp_path)), tmp_path / "init")
    assert moved[-1] == "config.json" and {"model.safetensors", "tokenizer.json", "e3orch_policy.json"} <= set(moved)
    assert sorted(f.name for f in out.iterdir()) == sorted(moved)
    assert not (tmp_path / ".init.tmp").exists()


def test_generation_threads_hold_while_generating_and_scoring_only(tiny_model: Path) -> None:
    """``policy.generation_threads``: the model runs on that many torch threads while the backend
    generates or scores, in whichever thread calls it, and the caller has its own count back
    afterwards (the trainer's updates keep ``policy.threads``); 0 leaves the count alone."""
    import asyncio

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen: list[int] = []
        for n, want in ((1, 1), (0, 2)):
            be = make_backend("transformers", str(tiny_model), device="cpu", generation_threads=n)
            hook = be.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
            seen.clear()
            be.generate(["### decide: milestone\n"], temperature=0.0, max_new_tokens=3)
            be.score(["### decide: milestone\n"], ["ANSWER: P1"])
            assert seen and set(seen) == {want} and torch.get_num_threads() == 2
            seen.clear()  # a worker thread (as rollouts and evaluation call it): its own count comes back too

            def in_worker(be=be) -> int:  # type: ignore[no-untyped-def]
                be.generate(["### decide: milestone\n"], temperature=0.0, max_new_tokens=3)
                return torch.get_num_threads()

            assert asyncio.run(asyncio.to_thread(in_worker)) == 2 and set(seen) == {want}
            hook.remove()
    finally:
        torch.set_num_threads(before)


def test_generation_logprobs_match_scoring_and_seed_repeats(tiny_model: Path) -> None:
    torch.set_num_threads(1)
    be = make_backend("transformers", str(tiny_model), device="cpu")
    prompts = ["### executors\nE1 a: b\n### decide: milestone\n", "### task\nP1: x\n### decide: plan for Solve P1\n"]
    a = be.generate(prompts, n=2, temperature=1.0, max_new_tokens=12, seed=5)
    b = be.generate(prompts, n=2, temperature=1.0, max_new_tokens=12, seed=5)
    assert [[g.token_ids for g in x] for x in a] == [[g.token_ids for g in x] for x in b]
    for prompt, gens in zip(prompts, a):
        assert len(gens) == 2
        for g in gens:
            assert len(g.logprobs) == len(g.token_ids) > 0
            # the sampled tokens re-scored by a plain forward pass (no padding, no cache): the
            # generation-time log-probs are what the trainer's ratio compares against
            ids = be.encode_prompts([prompt])[0]
            x = torch.tensor([ids + g.token_ids])
            with torch.no_grad():
                logits = be.model(x).logits[0, len(ids) - 1 : -1]
            ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(g.token_ids).unsqueeze(-1)).squeeze(-1)
            assert ref.tolist() == pytest.approx(g.logprobs, abs=2e-3)
    greedy1 = be.generate(prompts, temperature=0.0, max_new_tokens=8)
    greedy2 = be.generate(prompts, temperature=0.0, max_new_tokens=8)
    assert [x[0].text for x in greedy1] == [x[0].text for x in greedy2]


# A batch like a rollout's: one long executors block shared by most prompts, tasks of different
# lengths after it, a duplicate, and prompts that share too little to group.
_CARDS = "### executors\n" + "".join(f"E{i} solver{i}: answers part questions, cost {i}.5\n" for i in range(1, 7))
_CARDS2 = "### executors\n" + "".join(f"X{i} tool{i}: looks facts up, cost {i}.25\n" for i in range(1, 7))
SHARED_PROMPTS = [
    _CARDS + "### task\nP1: x\n### decide: plan for Solve P1\n",
    _CARDS + "### task\nP1: a longer task text than the first one\nP2: y\n### decide: milestone\n",
    "### decide: milestone\n",
    _CARDS + "### task\nP1: x\n### decide: plan for Solve P1\n",
    "### task\nP1: compute the sum of two numbers\n### decide: milestone\n",  # these two share a
    "### task\nP1: compute the sum of three small numbers\n### decide: milestone\n",  # (padded) pass
    _CARDS2 + "### task\nP1: y\n### decide: milestone\n",  # a second group: a shorter prefix,
    _CARDS2 + "### task\nP1: y\nP2: z\n### decide: plan for Solve P2\n",  # prefilled next to the first
]


def _forward_logprobs(be, prompt: str, token_ids: list[int]) -> list[float]:  # type: ignore[no-untyped-def]
    ids = be.encode_prompts([prompt])[0]
    with torch.no_grad():
        logits = be.model(torch.tensor([ids + token_ids])).logits[0, len(ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token_ids).unsqueeze(-1)).squeeze(-1).tolist()


def test_prefix_groups_share_long_prefixes_only() -> None:
    head = list(range(100, 140))
    seqs = [head + [1, 2, 3], head + [4], [7, 8, 9], head + [1, 2]]
    groups = prefix_groups(seqs)
    assert sorted(u for members, _ in groups for u in members) == [0, 1, 2, 3]
    assert sorted((sorted(m), p) for m, p in groups) == [([0, 1, 3], len(head)), ([2], 0)]  # the head once
    assert prefix_groups([head, head + [5]]) == [([0, 1], len(head) - 1)]  # every member keeps a token
    short = [list(range(MIN_SHARED_PREFIX - 2)) + [k] * 20 for k in range(3)]
    assert sorted(prefix_groups(short)) == [([0], 0), ([1], 0), ([2], 0)]  # too little shared


@pytest.fixture(scope="module")
def two_layer_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys of a second layer depend on attention in the first: a mask or position error in the
    prefill shows in later layers' cached keys, not only in the logits."""
    root = tmp_path_factory.mktemp("backend2")
    model = {"vocab_size": 400, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}
    return create_default_policy(load_params(write_tiny_params(root, policy={"model": model})), root / "init")


def test_shared_prefix_generation_matches_scoring_and_single_calls(two_layer_model: Path) -> None:
    torch.set_num_threads(1)
    be = make_backend("transformers", str(two_layer_model), device="cpu", batch_size=16)
    with torch.no_grad():  # sharpen attention: a random init attends almost uniformly, blind to
        for layer in be.model.model.layers:  # wrong positions or a pad let through the mask
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    ids = be.encode_prompts(SHARED_PROMPTS)
    groups = prefix_groups(list(dict.fromkeys(tuple(x) for x in ids)))
    shared = sorted(p for m, p in groups if len(m) > 1)
    assert len(shared) == 2 and shared[0] >= MIN_SHARED_PREFIX and shared[0] < shared[1]  # two groups
    # sampled, n=2 and a duplicate prompt: log-probs of the raw logits at the sampled tokens
    sampled = be.generate(SHARED_PROMPTS, n=2, temperature=1.0, max_new_tokens=16, seed=3)
    for prompt, gens in zip(SHARED_PROMPTS, sampled):
        assert len(gens) == 2
        for g in gens:
            assert g.prompt_tokens == len(be.encode_prompts([prompt])[0])
            assert g.logprobs == pytest.approx(_forward_logprobs(be, prompt, g.token_ids), abs=1e-4)
    # nucleus sampling: still the raw (temperature 1) log-probs
    for prompt, (g,) in zip(SHARED_PROMPTS, be.generate(SHARED_PROMPTS, temperature=0.7, top_p=0.5,
                                                         max_new_tokens=8, seed=1)):
        assert g.logprobs == pytest.approx(_forward_logprobs(be, prompt, g.token_ids), abs=1e-4)
    # greedy: batched == one prompt at a time, and the log-probs are what score() gives
    batched = be.generate(SHARED_PROMPTS, temperature=0.0, max_new_tokens=16)
    single = [be.generate([p], temperature=0.0, max_new_tokens=16)[0] for p in SHARED_PROMPTS]
    assert [x[0].token_ids for x in batched] == [x[0].token_ids for x in single]
    checked = 0
    for prompt, (g,) in zip(SHARED_PROMPTS, batched):
        text_ids = g.token_ids[:-1] if g.finished else g.token_ids
        if be.tokenizer(g.text, add_special_tokens=False)["input_ids"] != text_ids:
            continue  # score() re-tokenizes the text; compare where that gives the same tokens
        scored = be.score([prompt], [g.text])[0]  # ends with EOS
        assert g.logprobs == pytest.approx(scored if g.finished else scored[: len(g.logprobs)], abs=1e-4)
        assert be.completion_ids(g.text) == text_ids + [be.tokenizer.eos_token_id]  # the tokens score() scored
        if g.finished:
            assert be.completion_ids(g.text) == g.token_ids
        checked += 1
    assert checked >= 2


def test_score_in_batches_equals_one_forward_per_pair(two_layer_model: Path) -> None:
    """score() runs right-padded batches of similar length; each pair's log-probs are those of its
    own unpadded forward pass, whatever else shares the batch."""
    be = make_backend("transformers", str(two_layer_model), device="cpu")
    prompts = [*SHARED_PROMPTS, SHARED_PROMPTS[0], "### decide: act on P1\n"]
    completions = ["S1 | #2 | -", "MILESTONE: Solve P1, P2", "ANSWER: P4", "a much longer completion than the others are", "yes"]
    prompts, completions = prompts[: len(completions)], completions[: len(prompts)]
    batched = be.score(prompts, completions)
    for p, c, lp in zip(prompts, completions, batched):
        assert lp == pytest.approx(_forward_logprobs(be, p, be.completion_ids(c)), abs=1e-5)
        assert len(lp) == len(be.completion_ids(c))


def test_model_generate_fallback_keeps_the_contract(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Models the own loop cannot mask (flash attention, sliding windows) go through model.generate."""
    be = make_backend("transformers", str(tiny_model), device="cpu")
    monkeypatch.setattr(be, "_own_loop", lambda: False)
    out = be.generate(SHARED_PROMPTS[:3], temperature=1.0, max_new_tokens=10, min_new_tokens=10, seed=2)
    for prompt, (g,) in zip(SHARED_PROMPTS, out):
        assert len(g.token_ids) == 10
        assert g.logprobs == pytest.approx(_forward_logprobs(be, prompt, g.token_ids), abs=1e-4)


@pytest.mark.parametrize("own_loop", [True, False])
def test_row_seeds_make_each_draw_independent_of_its_batch(tiny_model: Path, own_loop: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt's sample depends on its own seed, not on which prompts share the call or the order."""
    be = make_backend("transformers", str(tiny_model), device="cpu")
    if not own_loop:
        monkeypatch.setattr(be, "_own_loop", lambda: False)

    def draw(prompts: list[str], seeds: list[int]) -> list[list[int]]:
        out = be.generate(prompts, temperature=1.0, max_new_tokens=12, seed=99, row_seeds=seeds)
        return [g[0].token_ids for g in out]

    a, b, c = SHARED_PROMPTS[0], SHARED_PROMPTS[1], SHARED_PROMPTS[4]
    alone = draw([a], [7])[0]
    assert draw([b, a, c], [3, 7, 4])[1] == alone
    assert draw([c, b, a], [4, 3, 7])[2] == alone
    # the same prompt twice in one batch with two seeds: two streams (12 tokens agree by chance at most rarely)
    twins = draw([a, a, a], [7, 8, 9])
    assert twins[0] == alone and len({tuple(t) for t in twins}) > 1
    with pytest.raises(ValueError, match="row_seeds"):
        be.generate([a, b], temperature=1.0, row_seeds=[1])


def test_min_new_tokens_forces_length(tiny_model: Path) -> None:
    be = make_backend("transformers", str(tiny_model), device="cpu")
    g = be.generate(["hello"], max_new_tokens=10, min_new_tokens=10, temperature=1.0, seed=1)[0][0]
    assert len(g.token_ids) == 10


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown policy backend"):
        make_backend("tgi", "x")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not os.environ.get("E3ORCH_VLLM_URL"),
                    reason="needs a CUDA GPU and a running vLLM server (E3ORCH_VLLM_URL; make vllm-serve)")
def test_vllm_backend_generates_with_logprobs(tiny_model: Path) -> None:
    be = make_backend("vllm", str(tiny_model), base_url=os.environ["E3ORCH_VLLM_URL"])
    out = be.generate(["### decide: milestone\n"], n=2, max_new_tokens=8, temperature=1.0, seed=0)
    assert len(out[0]) == 2 and all(len(g.logprobs) == len(g.token_ids) for g in out[0])


def test_vllm_backend_without_server_says_what_to_start(tiny_model: Path) -> None:
    with pytest.raises(ConnectionError, match="vllm-serve"):
        make_backend("vllm", str(tiny_model), base_url="http://127.0.0.1:9/v1")


class _FakeVLLM:
    """A local HTTP server answering the few vLLM endpoints the backend calls, recording each request
    body: it checks what the client sends (vLLM itself needs a GPU; the GPU test above runs it)."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, obj: object) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"data": [{"id": "served"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                outer.requests.append((self.path, body))
                if body.get("prompt_logprobs") is not None:  # scoring: one entry per prompt token
                    n = len(body["prompt"])
                    self._send({"choices": [{"index": 0, "prompt_logprobs": [None] + [
                        {"7": {"logprob": -0.25, "rank": 1}}] * (n - 1)}]})
                elif "prompt" in body:
                    self._send({"choices": [{"index": i, "text": "x", "finish_reason": "length",
                                             "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5]}}
                                            for i in range(len(body["prompt"]) * body.get("n", 1))]})
                else:
                    self._send({})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_vllm_backend_sends_the_trainers_token_ids_and_syncs_into_its_own_folder(
        tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.policy.backends.vllm import VLLMBackend

    hf = TransformersBackend(str(tiny_model), batch_size=4)
    server = _FakeVLLM()
    try:
        vb = VLLMBackend(str(tiny_model), base_url=server.url, sync_dir=str(tmp_path / "serve"))
        prompts = ["### decide: milestone\n", "### S1 P1 code normal: #1 good 3.5\n### decide: plan for Solve P1\n"]
        (gen,), _ = vb.generate(prompts, max_new_tokens=4)
        path, body = server.requests[-1]
        # the prompts as token ids, BOS first, exactly as the trainer and the transformers backend encode them
        assert path == "/v1/completions" and body["prompt"] == hf.encode_prompts(prompts)
        assert hf.tokenizer.bos_token_id is not None and body["prompt"][0][0] == hf.tokenizer.bos_token_id
        assert gen.token_ids == [7] and gen.logprobs == [-0.5]
        (scores,) = vb.score(prompts[:1], ["MILESTONE: Solve P1"])
        _, body = server.requests[-1]
        assert body["prompt"] == hf.encode_prompts(prompts[:1])[0] + hf.completion_ids("MILESTONE: Solve P1")
        assert scores == [-0.25] * len(hf.completion_ids("MILESTONE: Solve P1"))
        # weight sync writes the served copy and asks the server to reload; the policy folder is untouched
        before = (tiny_model / "model.safetensors").read_bytes()
        vb.update_weights(AutoModelForCausalLM.from_pretrained(str(tiny_model)))
        assert (tmp_path / "serve" / "model.safetensors").exists()
        assert [p for p, _ in server.requests[-2:]] == ["/collective_rpc", "/reset_prefix_cache"]
        assert (tiny_model / "model.safetensors").read_bytes() == before
        vb.release()
    finally:
        server.close()


def test_rl_refuses_to_sync_vllm_weights_into_the_warm_start(tiny_model: Path, tmp_path: Path) -> None:
    from conftest import tiny_params

    from e3orch.config import Params
    from e3orch.training.trainer import RLTrainer

    data = tiny_params(tmp_path)
    data["policy"].update(backend="vllm", vllm_model_dir=str(tiny_model), vllm_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="policy.vllm_model_dir: .* is the warm start itself"):
        RLTrainer(Params.model_validate(data), tiny_model)
