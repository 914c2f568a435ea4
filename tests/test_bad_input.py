"""Bad input through the CLI: one line naming the file, key or option, exit 2, nothing lost.

Each case is something a user can type: a params file with a key written twice, an empty one,
broken YAML, a damaged task table, a mistyped policy folder, an interrupted evaluation.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from e3orch.cli import main
from e3orch.config import load_params_file
from e3orch.data.tasks import read_tasks
from e3orch.evaluation.systems import check_local_policy
from e3orch.executors.base import ConfigError, build_pool, load_pool_specs
from e3orch.files import parse_yaml, write_text_atomic

REPO = Path(__file__).resolve().parents[1]


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, require exit 2 and a single stderr line; that line."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


# --- YAML files -------------------------------------------------------------------------------

def test_a_key_written_twice_is_an_error_naming_both_lines() -> None:
    with pytest.raises(ValueError, match=r"^p.yaml:3:3: not valid YAML: duplicate key 'seed' \(first on line 2\)$"):
        parse_yaml("prepare:\n  seed: 1\n  seed: 2\n", "p.yaml")
    # a section written twice would silently drop the first one's keys (its out_dir among them)
    with pytest.raises(ValueError, match=r"^p.yaml:4:1: .*duplicate key 'prepare' \(first on line 1\)$"):
        parse_yaml("prepare:\n  out_dir: /x\nengine: {}\nprepare:\n  seed: 2\n", "p.yaml")
    # equal keys in different mappings are fine
    assert parse_yaml("a: {x: 1}\nb: {x: 2}\n", "p.yaml") == {"a": {"x": 1}, "b": {"x": 2}}


def test_broken_yaml_is_one_line_with_its_position() -> None:
    with pytest.raises(ValueError, match=r"^p.yaml:2:1: not valid YAML: expected ',' or '\]'"):
        parse_yaml("prepare: {seed: [1\n", "p.yaml")


def test_params_files_that_say_nothing_or_say_it_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing but a comment\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_params_file(empty)
    twice = tmp_path / "twice.yaml"
    twice.write_text("prepare:\n  seed: 1\n  seed: 2\n")
    err = error_of(capsys, "prepare", "--params", str(twice), "--out-dir", str(tmp_path / "tasks"))
    assert err == f"e3orch prepare: error: {twice}:3:3: not valid YAML: duplicate key 'seed' (first on line 2)"
    assert not (tmp_path / "tasks").exists()


@pytest.mark.parametrize(("domains", "message"), [
    ("[math, math]", "prepare.domains: 'math' is listed twice"),
    ("[maths]", "prepare.domains: unknown sim domain 'maths'; known: multihop, math, code, table"),
])
def test_prepare_domains_are_checked_when_params_load(tmp_path: Path, domains: str, message: str) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(f"prepare:\n  domains: {domains}\n")
    with pytest.raises(ConfigError, match=message):
        load_params_file(p)


def test_live_sources_name_known_benchmarks(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("live:\n  sources: {humaneval: a.jsonl, gsm8kk: b.jsonl}\n")
    with pytest.raises(ConfigError, match=r"live\.sources: unknown live benchmark 'gsm8kk'; known: humaneval, mbpp"):
        load_params_file(p)


@pytest.mark.parametrize(("text", "message"), [
    ("train:\n  max_seq_len: 600\n", r"p.yaml: train.max_seq_len: 600 is shorter than policy.max_prompt_tokens "
                                       r"\+ the longest new-token budget \(672\); the update would cut"),
    ("policy:\n  max_new_tokens_plan: 600\n", r"p.yaml: warmstart.max_seq_len: 1024 is shorter .* \(1112\)"),
    ("warmstart:\n  max_seq_len: 2048\n", r"p.yaml: warmstart.max_seq_len: 2048 is longer than "
                                           r"policy.model.max_positions \(1536\), the small policy's position table$"),
])
def test_sequence_lengths_must_hold_a_prompt_and_its_answer(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_params_file(p)


def test_pool_files_name_the_file_the_entry_and_the_key(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("executors:\n  - name: a\n    kind: simulated\n    name: b\n")
    with pytest.raises(ConfigError, match=rf"^{twice}:4:5: not valid YAML: duplicate key 'name'"):
        load_pool_specs(twice)
    kind = tmp_path / "kind.yaml"
    kind.write_text("executors:\n  - name: ok\n    kind: simulated\n    skills: {retrieve: 0.5}\n"
                    "  - name: typo\n    kind: simulatd\n")
    with pytest.raises(ConfigError, match=rf"^{kind}: executors\[1\]\.kind: unknown executor kind 'simulatd'"):
        build_pool(kind)
    skill = tmp_path / "skill.yaml"
    skill.write_text("executors:\n  - name: a\n    kind: simulated\n    skills: {retrieve: 1.5}\n")
    with pytest.raises(ConfigError) as info:
        load_pool_specs(skill)
    assert str(info.value) == f"{skill}: executors[0].skills: skill 'retrieve' must be a probability in [0, 1], got 1.5"


# --- tables -----------------------------------------------------------------------------------

def test_damaged_task_tables_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=rf"^{junk}: not a readable task table \("):
        read_tasks(junk)
    folder = tmp_path / "folder.parquet"
    folder.mkdir()
    with pytest.raises(ValueError, match=rf"^{folder}: is a folder, not a task table$"):
        read_tasks(folder)
    wrong = tmp_path / "wrong.parquet"
    pl.DataFrame({"task_id": ["a", "a"], "colour": ["red", "blue"]}).write_parquet(wrong)
    with pytest.raises(ValueError) as info:
        read_tasks(wrong)
    assert str(info.value).startswith(f"{wrong}: not a valid task table: unexpected column 'colour'; no column 'split'")
    with pytest.raises(FileNotFoundError, match="run `e3orch prepare` first"):
        read_tasks(tmp_path / "absent.parquet")


def test_grade_names_a_task_table_that_is_missing_or_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"task_id": "x", "answer": "1"}\n')
    missing = tmp_path / "absent.parquet"
    err = error_of(capsys, "grade", "--benchmark", "sim", "--answers", str(answers), "--data", str(missing))
    assert err == f"e3orch grade: error: --data {missing}: no such file"
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    err = error_of(capsys, "grade", "--benchmark", "sim", "--answers", str(answers), "--data", str(junk))
    assert err.startswith(f"e3orch grade: error: --data {junk}: not a readable Parquet file (")


# --- commands ---------------------------------------------------------------------------------

def test_a_mistyped_policy_folder_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    with pytest.raises(FileNotFoundError, match="^--policy models/warmstrt: not a policy checkpoint directory"):
        check_local_policy("models/warmstrt", "--policy", "hint")
    with pytest.raises(FileNotFoundError):
        check_local_policy("./ckpt", "--policy", "hint")
    with pytest.raises(FileNotFoundError):  # a default path is local whatever it looks like
        check_local_policy("org/model", "--policy", "hint", local=True)
    check_local_policy("org/model", "--policy", "hint")  # could be a hub id: the loader decides


@pytest.mark.parametrize("shard", ["5/4", "1/0", "-1/2"])
def test_rollout_checks_its_shard_before_loading_anything(shard: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(capsys, "rollout", f"--shard={shard}", "--policy", "/nonexistent")
    assert "--shard" in err


def test_episode_lists_the_domains_there_are(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    err = error_of(capsys, "episode", "--domain", "nosuch")
    assert err.endswith("--domain nosuch: no such domain in the eval split; known: code, factcheck, math, multihop, "
                        "planning, research, table")


def test_init_policy_does_not_overwrite_a_model(tiny_init_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init = tiny_init_root / "models/init"
    before = (init / "model.safetensors").read_bytes()
    err = error_of(capsys, "init-policy", "--params", str(tiny_init_root / "params.yaml"))
    assert err == f"e3orch init-policy: error: {init} already holds a model; pass --force to replace it (or --out another folder)"
    assert (init / "model.safetensors").read_bytes() == before


def test_an_interrupted_evaluation_leaves_the_previous_results_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "ev"
    assert main(["evaluate", "--orchestrator", "heuristic", "--limit", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    metrics, episodes = (out / "metrics.json").read_text(), (out / "episodes.jsonl").read_text()
    assert json.loads(metrics)["systems"]["heuristic"] and episodes.count("\n") == 7  # one task per domain
    assert not list(out.glob("*.partial"))

    import e3orch.evaluation.evaluate as ev

    real = ev.run_systems

    async def interrupted(*args, on_system, **kwargs):  # type: ignore[no-untyped-def]
        results, _ = await real(*args, on_system=on_system, **kwargs)  # writes its episodes, then ^C
        raise KeyboardInterrupt

    monkeypatch.setattr(ev, "run_systems", interrupted)
    assert main(["evaluate", "--orchestrator", "upfront", "--limit", "1", "--out", str(out)]) == 130
    assert (out / "metrics.json").read_text() == metrics
    assert (out / "episodes.jsonl").read_text() == episodes


def test_write_text_atomic_replaces_whole_files(tmp_path: Path) -> None:
    p = write_text_atomic(tmp_path / "m.json", "one")
    write_text_atomic(p, "two")
    assert p.read_text() == "two" and sorted(x.name for x in tmp_path.iterdir()) == ["m.json"]
