"""The small default policy: a BPE tokenizer made for the protocol and a Llama-config causal LM.

``create_default_policy`` trains a byte-level BPE tokenizer on rendered prompts and teacher
completions (so executor cards, part tags and plan lines tokenize compactly), builds a randomly
initialised ``LlamaForCausalLM`` of the configured shape and saves both with
``save_pretrained``. Warm start then teaches it the protocol. Any Hugging Face causal LM can be
used instead through ``policy.base_model``.

What this module deliberately does not do: train the model (training/ does), or download
anything.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from e3orch.config import Params

log = logging.getLogger(__name__)

SPECIAL = {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}
# policy.model's shape keys → the LlamaConfig keys they set (vocab_size: the tokenizer's, at most the key)
LLAMA_KEYS = {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "num_layers": "num_hidden_layers",
              "num_heads": "num_attention_heads", "max_positions": "max_position_embeddings"}


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, split_digits: bool = False):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer of ``vocab_size`` trained on ``texts``; ``split_digits``: no merge
    joins a digit to anything, so every number reads digit by digit."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SPECIAL["pad"], SPECIAL["bos"], SPECIAL["eos"]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL["bos"],
        eos_token=SPECIAL["eos"],
        pad_token=SPECIAL["pad"],
        padding_side="left",
    )


def create_default_policy(params: Params, out_dir: str | Path | None = None, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.executors.base import load_pool_specs
    from e3orch.training.demos import collect_demonstrations

    out = Path(out_dir or params.policy.init_dir)
    cfg = params.policy.model
    tasks = sim_tasks(params, "train")[:: max(1, len(sim_tasks(params, "train")) // params.policy.tokenizer_tasks)]
    specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
    demos, _ = collect_demonstrations(tasks, specs, params.engine, seed=seed, style=params.policy.prompt)
    texts = [d.prompt + d.completion for d in demos]
    tokenizer = train_tokenizer(texts, cfg.vocab_size, split_digits=cfg.split_digits)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        **{llama: getattr(cfg, key) for key, llama in LLAMA_KEYS.items()},
        num_key_value_heads=cfg.num_heads,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    meta = {"kind": "e3orch-default-policy", "params": n_params, "vocab_size": len(tokenizer), "prompt": params.policy.prompt,
            "tokenizer_texts": len(texts), "split_digits": cfg.split_digits, "seed": seed}
    # Written next to ``out`` and moved in with config.json last: a reader that sees config.json
    # (the "a policy is here" mark everywhere) finds the tokenizer and weights complete.
    dest = out.resolve()  # out may be "."
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "e3orch_policy.json").write_text(json.dumps(meta, indent=2) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(tmp.iterdir(), key=lambda f: f.name == "config.json"):
        f.replace(out / f.name)
    tmp.rmdir()
    log.info("created default policy in %s (%d params)", out, n_params)
    return out


def check_default_policy(params: Params, folder: str | Path) -> None:
    """Raise ``ValueError`` when ``folder`` holds a small default policy made with another shape or
    tokenizer than ``policy.model`` asks for (a warm start would silently start from it); folders
    made otherwise (a ``policy.base_model``, a trained policy) are not checked."""
    folder = Path(folder)
    meta_path = folder / "e3orch_policy.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("kind") != "e3orch-default-policy" or not (folder / "config.json").exists():
        return
    config = json.loads((folder / "config.json").read_text())
    cfg = params.policy.model
    made = {**{key: config.get(llama) for key, llama in LLAMA_KEYS.items()}, "split_digits": meta.get("split_digits", False)}
    wrong = [f"{k} {v} (params: {getattr(cfg, k)})" for k, v in made.items() if v != getattr(cfg, k)]
    if wrong:
        raise ValueError(f"{folder}: a default policy made with policy.model {', '.join(wrong)}; "
                         f"remove it (or run `e3orch init-policy`) to make one from params")


def save_policy_dir(model: Any, tokenizer: Any, out: str | Path, init_dir: str | Path, *,
                    state_dict: dict[str, Any] | None = None, **meta_update: Any) -> Path:
    """Replace ``out`` with a save_pretrained policy (model + tokenizer) and its
    ``e3orch_policy.json``: the metadata of ``init_dir`` updated with ``meta_update``.

    ``state_dict``: the full weights when ``model``'s own are sharded (FSDP: gather them with
    ``accelerator.get_state_dict`` on every process first)."""
    import shutil

    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, state_dict=state_dict)
    tokenizer.save_pretrained(out)
    src = Path(init_dir) / "e3orch_policy.json"
    meta = json.loads(src.read_text()) if src.exists() else {}
    meta.update(meta_update)
    (out / "e3orch_policy.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out
