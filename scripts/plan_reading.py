"""What a policy trained on plan-slot questions reads: a fresh default policy, taught the warm
start's plan questions alone, probed every few steps.

    .venv/bin/python scripts/plan_reading.py --seed 1                      # every teacher, batches by length
    .venv/bin/python scripts/plan_reading.py --seed 1 --batch-by-question  # every answer of a question in one batch
    .venv/bin/python scripts/plan_reading.py --seed 1 --teachers heuristic # one teacher's answers only
    .venv/bin/python scripts/plan_reading.py --seed 1 --soft-labels       # every question taught the whole mix's answers

The demonstrations are those `e3orch warmstart` collects for `warmstart.seed` = --seed (its tasks,
teacher mix and pools); only their plan-slot questions are trained on (a factored `policy.prompt`),
from a policy built by `e3orch init-policy`'s code with that seed, at `warmstart.lr` and
`tokens_per_batch`. Every --every steps it prints P(#3) against P(#2) for a slot on the default
pool's menus — a lookup's (`#1 good free | #2 good free | #3 strong premium`) and a reasoning
part's — for an easy, a normal and a hard part, as a first attempt (x0), as a repair (` x1`) and
with ` P1` in place of ` x1`: as long as ` x1` and meaningless, so a policy that answers ` P1` as it
answers ` x1` reads the question's length, not its words (docs/benchmarks.md, "Every answer of a
question in one batch").
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

MENUS = {"retrieve": "#1 good free | #2 good free | #3 strong premium",
         "reason": "#1 good mid | #2 good mid | #3 strong pricey"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=float, default=20.0, help="passes over the plan questions (default 20)")
    ap.add_argument("--teachers", default="", help="comma-separated teachers whose episodes' questions are kept (default: "
                    "all); their answers, or with --soft-labels the whole mix's")
    ap.add_argument("--batch-by-question", action="store_true", help="every answer of a question in one batch")
    ap.add_argument("--soft-labels", action="store_true",
                    help="every question taught every answer of the mix, each weighing its share (warmstart.soft_labels)")
    ap.add_argument("--every", type=int, default=100, help="probe every N steps (default 100)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.config import load_params
    from e3orch.executors.base import load_pool_specs
    from e3orch.policy.backends.hf import load_tokenizer
    from e3orch.policy.model import create_default_policy
    from e3orch.policy.prompts import TIER_ANSWER_STYLES, tier_answer
    from e3orch.training.data import encode_pair, merge_copies, prompt_ids
    from e3orch.training.sft import sft_train
    from e3orch.training.warmstart import teacher_demonstrations

    torch.set_num_threads(args.threads)
    params = load_params(args.params)
    if args.soft_labels:
        params = params.model_copy(update={"warmstart": params.warmstart.model_copy(update={"soft_labels": True})})
    cfg = params.warmstart
    init = Path(tempfile.mkdtemp(prefix="plan-reading-")) / "init"
    create_default_policy(params, init, seed=args.seed)
    tok = load_tokenizer(str(init))
    demos, _ = teacher_demonstrations(params, sim_tasks(params, "train"),
                                      load_pool_specs(resolve_pool_path(params.evaluate.executors)), args.seed)
    keep = set(filter(None, args.teachers.split(",")))
    plan = [d for d in demos if d.kind == "plan" and (not keep or d.teacher.split(":")[0] in keep)]
    examples = []
    for d in plan:
        if (e := encode_pair(tok, d.prompt, d.completion, cfg.max_seq_len)) is not None:
            e.weight = d.weight  # a soft label's share of its question
            examples.append(e)
    examples = merge_copies(examples)
    if not examples:
        print(f"plan_reading: no plan questions (policy.prompt {params.policy.prompt}, teachers {args.teachers or 'all'})",
              file=sys.stderr)
        return 2
    print(f"{round(sum(d.weight for d in plan))} plan questions ({len(examples)} distinct question-answer pairs) "
          f"from {len(demos)} demonstrations")
    model = AutoModelForCausalLM.from_pretrained(str(init))

    def p3(question: str) -> float:
        """P(#3) / (P(#2) + P(#3)) for the slot answer ``S1 | #k | -`` (``S1 | premium #3 | -`` when
        ``policy.prompt`` answers tier first)."""
        p = prompt_ids(tok, question)
        probs = []
        for k in (2, 3):
            answer = f"S1 | #{k} | -"
            answer = tier_answer(question, answer) if params.policy.prompt in TIER_ANSWER_STYLES else answer
            c = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            logp = model(torch.tensor([p + c])).logits.log_softmax(-1)[0]
            probs.append(math.exp(sum(float(logp[len(p) + i - 1, t]) for i, t in enumerate(c))))
        return probs[1] / sum(probs)

    def probe(step: int, total: int, loss: float) -> None:
        if step % args.every and step != total:
            return
        model.eval()
        cells = []
        with torch.no_grad():
            for skill, menu in MENUS.items():
                for note in ("", " x1", " P1"):
                    ps = [p3(f"### S1 P1 {skill} {d}{note}: {menu}\n### decide: plan for Solve P1\n")
                          for d in ("easy", "normal", "hard")]
                    cells.append(f"{skill[:3]}{note or ' x0'} " + "/".join(f"{x:.2f}" for x in ps))
        model.train()
        print(f"step {step}/{total} loss {loss:.3f}  P(#3) easy/normal/hard: " + "  ".join(cells), flush=True)

    sft_train(model, examples, accelerator=Accelerator(cpu=True), lr=cfg.lr, epochs=args.epochs,
              tokens_per_batch=cfg.tokens_per_batch, seed=args.seed, pad_id=tok.pad_token_id,
              group_prompts=args.batch_by_question, on_step=probe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
