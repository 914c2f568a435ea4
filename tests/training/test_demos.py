"""Demonstrations and corrections: who acts, who labels, what is recorded."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from e3orch.config import EngineConfig
from e3orch.data.sim import generate_task, stable_seed
from e3orch.executors.base import build_pool, load_pool_specs
from e3orch.orchestration.episode import run_episode
from e3orch.orchestration.handwritten import make_handwritten
from e3orch.training.demos import Recorder

REPO = Path(__file__).resolve().parents[2]


def test_with_an_actor_the_actor_acts_and_the_teacher_labels_every_state_it_reaches() -> None:
    task = generate_task(0, "research", 0, "train")  # independent parts P1..Pk, then a final part using them
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    engine = EngineConfig()
    seed = stable_seed(0, task.task_id)

    def episode(orch):  # type: ignore[no-untyped-def]
        return asyncio.run(run_episode(task, orch, build_pool(specs), engine, seed=seed))

    names = [s.name for s in specs]
    alone = episode(make_handwritten("sequential", names))
    rec = Recorder(make_handwritten("heuristic", names), style="compact", actor=make_handwritten("sequential", names))
    acted = episode(rec)
    # the episode is the actor's, decision for decision
    assert [m.text for m in acted.milestones] == [m.text for m in alone.milestones]
    assert acted.answer == alone.answer and acted.cost == alone.cost
    # every state the actor reached is labelled with what the heuristic would do there
    assert len(rec.records) == 2 * len(alone.milestones) + 1
    kind, obs, label, _ = rec.records[0]
    assert kind == "milestone" and obs.history == ()
    wide = [line.split(":")[0] for line in task.question.splitlines() if ", using" not in line and line[:1] == "P"]
    assert len(wide) >= 2
    assert label == "MILESTONE: Solve " + ", ".join(wide)          # the heuristic solves the independent parts at once
    assert alone.milestones[0].text == f"Solve {wide[0]}"           # while the actor took one
    assert rec.agreed < len(rec.records)
    kind, obs, label, mixed = rec.records[1]
    assert kind == "plan" and obs.pending_milestone == f"Solve {wide[0]}"
    assert re.fullmatch(r"S1 \| #\d \| -", label)  # its slot's part by menu rank, no instruction to copy
    assert mixed == []  # no labellers: the teacher's own answer only


def test_without_an_actor_the_teacher_acts_and_everything_is_recorded() -> None:
    task = generate_task(0, "math", 0, "train")
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    names = [s.name for s in specs]
    rec = Recorder(make_handwritten("heuristic", names), style="compact")
    ep = asyncio.run(run_episode(task, rec, build_pool(specs), EngineConfig(), seed=1))
    assert len(rec.records) == 2 * len(ep.milestones) + 1
    assert rec.records[-1][0] == "milestone" and rec.records[-1][2].startswith("ANSWER: ")


def test_demo_copies_oversample_answers_and_later_milestones() -> None:
    from e3orch.config import WarmstartConfig
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import demo_copies

    task = generate_task(0, "research", 0, "train")
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    demos, _ = collect_demonstrations([task], specs, EngineConfig(), mix={"heuristic": 1.0}, style="compact")
    cfg = WarmstartConfig(answer_oversample=4, retry_oversample=3)
    by_kind = [(d.kind, d.completion.split(":")[0], bool(d.obs and d.obs.history), demo_copies(d, cfg)) for d in demos]
    # first milestone once, every plan once, later milestones 3 times, the answer 4 times
    assert by_kind[0] == ("milestone", "MILESTONE", False, 1)
    assert by_kind[-1] == ("milestone", "ANSWER", True, 4)
    assert {c for k, _, _, c in by_kind if k == "plan"} == {1}
    later = [c for k, head, hist, c in by_kind if k == "milestone" and head == "MILESTONE" and hist]
    assert later and set(later) == {3}
    assert [demo_copies(d, WarmstartConfig()) for d in demos] == [4 if d.completion.startswith("ANSWER:") else 1
                                                                 for d in demos]


def test_demo_copies_weigh_per_part_questions_about_results() -> None:
    from e3orch.config import WarmstartConfig
    from e3orch.policy.prompts import asks_about_result
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import demo_copies

    tasks = [generate_task(0, d, i, "train") for d in ("multihop", "math") for i in range(3)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    demos, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 1.0}, style="per_part")
    cfg = WarmstartConfig(result_oversample=5, retry_oversample=2)
    results = [d for d in demos if d.kind == "milestone" and asks_about_result(d.prompt)]
    opened = [d for d in demos if d.kind == "milestone" and not asks_about_result(d.prompt)]
    # repair-or-move-on questions: a result line (confidence and attempts), answered yes and no
    assert results and {d.completion for d in results} == {"yes", "no"}
    assert all(re.search(r"### part: P\d+ \w+ \w+: \d\.\d\d x\d", d.prompt) for d in results)
    assert {demo_copies(d, cfg) for d in results} == {5}
    # every other question keeps its copies: open parts of later milestones retry_oversample, the first milestone's one
    assert {demo_copies(d, cfg) for d in opened} == {1, 2}
    assert {demo_copies(d, cfg) for d in demos if d.kind == "plan"} == {1}
    assert {demo_copies(d, WarmstartConfig(result_oversample=1)) for d in demos} == {1}  # oversampling off: one copy each
    # never fewer than a later milestone's other questions get
    assert {demo_copies(d, WarmstartConfig(result_oversample=1, retry_oversample=3)) for d in results} == {3}


def test_demo_copies_weigh_plan_slot_questions() -> None:
    from e3orch.config import WarmstartConfig
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import demo_copies

    tasks = [generate_task(0, d, i, "train") for d in ("research", "planning") for i in range(2)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    demos, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 1.0}, style="per_part_tiers")
    cfg = WarmstartConfig(plan_oversample=6, result_oversample=2, retry_oversample=1)
    plans = [d for d in demos if d.kind == "plan"]
    # one question per plan slot (one part, its menu of tiers), each weighed plan_oversample times
    assert plans and all(re.fullmatch(r"### S1 P\d+ \w+ (easy|normal|hard)( x\d)?: #1 .+\n### decide: plan for Solve P\d+\n",
                                      d.prompt) for d in plans)
    assert {demo_copies(d, cfg) for d in plans} == {6}
    # the milestone questions keep theirs
    assert ({demo_copies(d, cfg) for d in demos if d.kind == "milestone"}
            == {demo_copies(d, WarmstartConfig(result_oversample=2, retry_oversample=1)) for d in demos if d.kind == "milestone"}
            == {1, 2})


def test_slot_echo_teaches_each_plan_slot_with_its_part_restated() -> None:
    from e3orch.config import WarmstartConfig
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import taught_completion

    tasks = [generate_task(0, d, i, "train") for d in ("research", "code") for i in range(2)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    demos, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 1.0}, style="per_part_tiers")
    echo, plain = WarmstartConfig(slot_echo=True), WarmstartConfig()
    plans = [d for d in demos if d.kind == "plan"]
    assert plans and all(taught_completion(d, plain) == d.completion for d in demos)
    for d in plans:
        skill, level = re.match(r"### S1 P\d+ (\w+) (\w+)", d.prompt).groups()  # type: ignore[union-attr]
        assert taught_completion(d, echo) == d.completion.replace("S1 |", f"S1 {skill} {level} |", 1)
    assert {skill for d in plans for skill in re.findall(r"^S1 (\w+) ", taught_completion(d, echo))} >= {"retrieve", "code"}
    assert all(taught_completion(d, echo) == d.completion for d in demos if d.kind == "milestone")


def test_tier_answers_teach_each_plan_slot_its_ranks_tier_first() -> None:
    from e3orch.training.demos import collect_demonstrations

    tasks = [generate_task(0, d, i, "train") for d in ("research", "code", "math") for i in range(2)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    mix = {"heuristic": 0.5, "thrifty": 0.5}
    kw: dict[str, Any] = {"mix": mix, "randomize": True, "generated_share": 0.5}
    tiered, _ = collect_demonstrations(tasks, specs, EngineConfig(), style="per_part_tier_answers", **kw)
    plain, _ = collect_demonstrations(tasks, specs, EngineConfig(), style="per_part_tiers", **kw)
    # the same episodes, questions and decisions; a plan slot's answer names its rank's tier first
    assert [(d.kind, d.prompt) for d in tiered] == [(d.kind, d.prompt) for d in plain]
    plans = 0
    for t, p in zip(tiered, plain):
        if t.kind != "plan":
            assert t.completion == p.completion
            continue
        plans += 1
        rank = re.fullmatch(r"S1 \| #(\d) \| -", p.completion).group(1)  # type: ignore[union-attr]
        tier = re.search(rf"#{rank} \w+ (\w+)", t.prompt).group(1)  # type: ignore[union-attr]
        assert t.completion == f"S1 | {tier} #{rank} | -"
    assert plans > 10
    assert {re.match(r"S1 \| (\w+)", d.completion).group(1) for d in tiered if d.kind == "plan"} >= {"mid", "premium"}  # type: ignore[union-attr]


def test_factored_style_teaches_a_plan_slot_by_slot() -> None:
    from e3orch.policy.prompts import split_decision, sub_prompts
    from e3orch.training.demos import collect_demonstrations

    tasks = [generate_task(0, "research", i, "train") for i in range(3)]  # wide first plans
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    whole, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 1.0}, randomize=False, style="compact")
    factored, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 1.0}, randomize=False, style="factored")
    # milestones as they were; every plan becomes its slots' questions, in order, each with its answer
    expected: list[tuple[str, str]] = []
    for d in whole:
        if d.kind == "milestone":
            expected.append((d.prompt, d.completion))
        else:
            expected += zip(sub_prompts(d.obs, "plan") or [], split_decision(d.obs, d.completion) or [])  # type: ignore[arg-type]
    assert [(d.prompt, d.completion) for d in factored] == expected
    plans = [d for d in factored if d.kind == "plan"]
    assert len(plans) > sum(d.kind == "plan" for d in whole)
    for (slot_line, line), q in zip([(w.prompt.splitlines()[k], ln) for w in whole if w.kind == "plan"
                                     for k, ln in enumerate(w.completion.splitlines())], plans):
        assert q.completion == "S1 | " + line.split(" | ")[1] + " | -"
        assert q.prompt == re.sub(r"^### S\d+ ", "### S1 ", slot_line) + f"\n### decide: plan for Solve {slot_line.split()[2]}\n"


def test_factored_agreement_compares_slots_not_the_wiring() -> None:
    from e3orch.orchestration.episode import Observation
    from e3orch.training.demos import _same

    question = "A task.\nP1: (easy) Look up X.\nP2: (hard) Compute Y, using P1.\nFinal answer: the result of P2."
    obs = Observation(task_id="t", question=question, cards=tuple(load_pool_specs(REPO / "configs/executors/default.yaml")),
                      history=(), pending_milestone="Solve P1, P2", milestones_left=5, subtasks_left=10,
                      cost_left=10.0, max_plan_subtasks=8)
    taught = "S1 | #1 | -\nS2 | #3 | -"  # a taught slot line leaves the wiring out
    assert _same("plan", obs, "S1 | #1 | -\nS2 | #3 | S1", taught, "factored")  # the factored policy wires P2 to P1
    assert not _same("plan", obs, "S1 | #1 | -\nS2 | #2 | S1", taught, "factored")
    assert not _same("plan", obs, "S1 | #1 | -\nS2 | #3 | S1", taught, "compact")  # compact compares the text
    assert _same("milestone", obs, "MILESTONE: Solve P1", "MILESTONE: Solve P1", "factored")


def test_mix_labellers_weigh_each_answer_by_its_share_of_the_mix() -> None:
    from e3orch.training.demos import mix_labellers

    names = ["a", "b", "c"]
    labellers = mix_labellers({"heuristic": 2.0, "explore": 1.0, "single": 1.0}, names)
    # heuristic half the mix; explore's three needs and single's three executors a twelfth each
    assert [(round(w, 6), t.name) for w, t in labellers] == [
        (0.5, "heuristic"), (0.083333, "explore"), (0.083333, "explore"), (0.083333, "explore"),
        (0.083333, "single:a"), (0.083333, "single:b"), (0.083333, "single:c")]
    assert [t.need for _, t in labellers[1:4]] == [1, 2, 3]  # type: ignore[attr-defined]


def test_soft_labels_teach_every_plan_slot_the_mix_of_answers() -> None:
    from e3orch.training.demos import collect_demonstrations

    tasks = [generate_task(0, d, i, "train") for d in ("research", "multihop", "math") for i in range(3)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    mix = {"heuristic": 0.4, "explore": 0.3, "thrifty": 0.3}
    hard, hard_eps = collect_demonstrations(tasks, specs, EngineConfig(), mix=mix, randomize=False, style="per_part_tiers")
    soft, soft_eps = collect_demonstrations(tasks, specs, EngineConfig(), mix=mix, randomize=False, style="per_part_tiers",
                                            soft_labels=True)
    # the same episodes and milestone questions; only the plan slots' answers change
    assert [(e.correct, e.cost) for e in soft_eps] == [(e.correct, e.cost) for e in hard_eps]
    assert ([(d.prompt, d.completion, d.weight) for d in soft if d.kind == "milestone"]
            == [(d.prompt, d.completion, d.weight) for d in hard if d.kind == "milestone"])
    assert all(d.weight == 1.0 for d in hard)
    shares: dict[str, dict[str, float]] = {}
    for d in soft:
        if d.kind == "plan":
            shares.setdefault(d.prompt, {})[d.completion] = shares.get(d.prompt, {}).get(d.completion, 0.0) + d.weight
    # every question the teachers were asked is still asked as often, its answers' shares summing to one each time
    asked: dict[str, int] = {}
    for d in hard:
        if d.kind == "plan":
            asked[d.prompt] = asked.get(d.prompt, 0) + 1
    assert {p: round(sum(s.values()), 9) for p, s in shares.items()} == asked
    shares = {p: {a: w / asked[p] for a, w in s.items()} for p, s in shares.items()}
    # on the default pool a lookup's menu is #1 good free | #2 good free | #3 strong premium: heuristic (0.4) sends a
    # hard first attempt to #3, an easier one to #2; thrifty (0.3) every first attempt to #2; both every repair to #3;
    # explore (0.3) draws fair, good or strong, which name the search tool (#2) twice and the frontier model (#3) once
    want = {"easy": {"#2": 0.9, "#3": 0.1}, "normal": {"#2": 0.9, "#3": 0.1}, "hard": {"#2": 0.5, "#3": 0.5},
            "repair": {"#2": 0.2, "#3": 0.8}}
    seen = set()
    for prompt, share in shares.items():
        m = re.match(r"### S1 P\d+ (\w+) (\w+)( x\d)?: ", prompt)
        assert m is not None
        got = {a.split(" | ")[1]: round(w, 9) for a, w in share.items()}
        if m.group(1) == "retrieve":
            case = "repair" if m.group(3) else m.group(2)
            assert got == want[case], (prompt, got)
            seen.add(case)
        elif m.group(1) == "compute":  # the calculator is all three needs: every teacher answers #3
            assert got == {"#3": 1.0}
    assert seen == set(want)


def test_soft_labels_weigh_the_sft_examples(tiny_init_root: Path) -> None:
    from e3orch.config import WarmstartConfig
    from e3orch.policy.backends.hf import load_tokenizer
    from e3orch.training.data import merge_copies
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import encode_demos

    tok = load_tokenizer(str(tiny_init_root / "models/init"))
    tasks = [generate_task(0, "multihop", i, "train") for i in range(3)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    soft, _ = collect_demonstrations(tasks, specs, EngineConfig(), mix={"heuristic": 0.4, "explore": 0.3, "thrifty": 0.3},
                                     randomize=False, style="per_part_tiers", soft_labels=True)
    cfg = WarmstartConfig(plan_oversample=2, answer_oversample=1, result_oversample=1)
    examples = merge_copies(encode_demos(soft, tok, cfg, 512))
    by_pair: dict[tuple[str, str], float] = {}
    for d in soft:  # what each (question, answer) should weigh: its shares, each counted as many times as its copies
        key = (d.prompt, d.completion)
        by_pair[key] = by_pair.get(key, 0.0) + d.weight * (2 if d.kind == "plan" else 1)
    assert len(examples) == len(by_pair)
    assert sorted(round(e.weight, 9) for e in examples) == sorted(round(w, 9) for w in by_pair.values())
    assert any(0 < e.weight < 1 for e in examples)  # a hard lookup's #3 is a half of one question, twice


def taught_both_ways(domains: list[tuple[str, int]], teacher: str, menu_rank: str) -> tuple[list[Any], list[Any]]:
    """One teacher's per_part_tiers demonstrations on the default pool under menu_rank highest and
    ``menu_rank``: the same episodes, so the same questions in the same order."""
    from e3orch.training.demos import collect_demonstrations

    tasks = [generate_task(0, domain, i, "train") for domain, n in domains for i in range(n)]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    kw = {"mix": {teacher: 1.0}, "randomize": False, "style": "per_part_tiers"}
    high, _ = collect_demonstrations(tasks, specs, EngineConfig(), **kw)  # type: ignore[arg-type]
    other, _ = collect_demonstrations(tasks, specs, EngineConfig(), menu_rank=menu_rank, **kw)  # type: ignore[arg-type]
    assert [(d.kind, d.prompt) for d in high] == [(d.kind, d.prompt) for d in other]
    return high, other


def test_menu_rank_need_teaches_the_rank_the_rule_asked_for() -> None:
    """policy.menu_rank: need — the same episodes and cards as highest; a first attempt of thrifty
    is #2 and a repair #3 whatever else those ranks name (a strong card that is the cheapest good
    one: under highest its first attempts read #3)."""
    high, need = taught_both_ways([("math", 3), ("table", 3), ("multihop", 3)], "thrifty", "need")
    pairs = [(h, n) for h, n in zip(high, need) if h.kind == "plan"]
    firsts = [(h, n) for h, n in pairs if not re.search(r"### S\d+ P\d+ \w+ \w+ x\d", n.prompt)]
    repairs = [(h, n) for h, n in pairs if (h, n) not in firsts]
    assert firsts and repairs
    assert all("| #2 |" in n.completion for _, n in firsts)
    assert all("| #3 |" in n.completion for _, n in repairs)
    # the calculator is the cheapest card good at compute and also strong at it: #2 and #3 of a sum's menu
    assert any("| #3 |" in h.completion and "| #2 |" in n.completion for h, n in firsts)
    assert all(h.completion == n.completion for h, n in repairs)  # a repair's need is its card's own level


def test_menu_rank_lowest_teaches_a_shared_card_by_its_lowest_rank() -> None:
    """policy.menu_rank: the same episodes and cards, each written as the lowest rank naming it."""
    high, low = taught_both_ways([("multihop", 2), ("research", 2)], "heuristic", "lowest")
    pairs = [(h, lo) for h, lo in zip(high, low) if h.kind == "plan"]
    assert pairs and all(h.completion == lo.completion for h, lo in zip(high, low) if h.kind != "plan")

    def card(prompt: str, answer: str) -> str:  # what the menu shows at the answer's rank
        rank = re.search(r"\| #(\d) \|", answer).group(1)  # type: ignore[union-attr]
        return re.search(rf"#{rank} ([^|\n]+)", prompt).group(1).strip()  # type: ignore[union-attr]

    for h, lo in pairs:
        assert card(h.prompt, h.completion) == card(lo.prompt, lo.completion)
        ranks = [k for k, shown in re.findall(r"#(\d) ([^|\n]+)", lo.prompt) if shown.strip() == card(lo.prompt, lo.completion)]
        assert f"| #{ranks[0]} |" in lo.completion and f"| #{ranks[-1]} |" in h.completion
    # on the default pool the search tool is #1 and #2 of a lookup's menu: heuristic's easy lookups
    assert any("| #2 |" in h.completion and "| #1 |" in lo.completion for h, lo in pairs)
