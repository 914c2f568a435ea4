"""MLflow tracking of the pipeline: one parent run per pipeline, one nested run per stage.

``dvc repro`` runs every stage in its own process, so the parent run cannot be held open by one
of them. Each stage finds its parent by the tag ``e3orch.pipeline_key`` (a hash of the resolved
params, so ``dvc exp run -S rewards.w_cost=0.5`` gets a new parent and re-running stages with the
same params reuses the old one) and nests its own run under it. ``E3ORCH_PIPELINE_RUN_ID`` (or
``parent_run_id=``) names the parent explicitly; the Prefect flow opens one with
:func:`pipeline_run` and hands its id to every task.

Where runs go: ``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<repo root>/mlflow.db``; a new
experiment (``e3orch``, or ``E3ORCH_MLFLOW_EXPERIMENT``) keeps its artifacts in
``<repo root>/mlartifacts`` so nothing lands in a stray ``./mlruns``. The repo root is
``DVC_ROOT`` (set by DVC, also for queued and ``--temp`` experiments), else the nearest folder
upwards holding ``params.yaml`` or ``dvc.yaml``, else the working directory.

The trained policy is logged as an MLflow *logged model* (``create_logged_model`` plus the
``save_pretrained`` folder as its artifacts, linked to the run as an output), not with the
``transformers`` flavour: the flavour needs the model and tokenizer loaded in memory, copies the
weights once more, and on this stack failed outright while inferring pip requirements
(``torchvision`` lookup). The folder reloads with ``from_pretrained`` after
``mlflow.artifacts.download_artifacts("models:/<model_id>")``.

What this module deliberately does not do: compute anything a stage needs, retry, or raise into
a stage. Every MLflow failure becomes one warning and the stage carries on; ``E3ORCH_TRACKING=0``
turns tracking off. It is the only module of ``e3orch`` that imports ``mlflow``, and it does so
lazily, so importing ``e3orch`` stays cheap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

ENV_TRACKING = "E3ORCH_TRACKING"
ENV_PARENT = "E3ORCH_PIPELINE_RUN_ID"
ENV_EXPERIMENT = "E3ORCH_MLFLOW_EXPERIMENT"
DEFAULT_EXPERIMENT = "e3orch"
KEY_TAG = "e3orch.pipeline_key"
ROLE_TAG = "e3orch.role"          # pipeline | stage | system
STAGE_TAG = "e3orch.stage"
PARENT_TAG = "mlflow.parentRunId"  # what the MLflow UI nests by
_ROOT_MARKERS = ("params.yaml", "dvc.yaml")
HEADLINE = ("accuracy", "cost", "makespan_s", "ie", "n")
_PARAMS_PER_BATCH = 100            # MLflow's limit for params (and tags) in one log_batch

F = TypeVar("F", bound=Callable[..., Any])


# -- where runs go -----------------------------------------------------------------------------

def enabled() -> bool:
    """False when ``E3ORCH_TRACKING`` is 0/false/no/off."""
    return os.environ.get(ENV_TRACKING, "1").strip().lower() not in {"0", "false", "no", "off", ""}


def is_main_process() -> bool:
    """False in the other processes of a multi-process launch (``torchrun``, ``accelerate
    launch`` set ``RANK``): only the main process tracks, so one stage is one run."""
    return os.environ.get("RANK", "0").strip() in {"0", ""}


def repo_root(start: str | Path | None = None) -> Path:
    if os.environ.get("DVC_ROOT") and start is None:
        return Path(os.environ["DVC_ROOT"]).resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / m).exists() for m in _ROOT_MARKERS):
            return folder
    return here


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def artifact_location(uri: str) -> str | None:
    """``<repo root>/mlartifacts`` for local stores; remote servers choose their own."""
    scheme = uri.split(":", 1)[0] if ":" in uri else ""
    if scheme in ("", "sqlite", "file"):
        return (repo_root() / "mlartifacts").as_uri()
    return None


def pipeline_key(params: Any) -> str:
    """Hash of the resolved params: the same params.yaml content (and overrides) → the same key."""
    text = json.dumps(_dump(params), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1e-3}}`` → ``{"train.lr": 1e-3}`` (lists and tuples stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def numeric(data: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a (nested) mapping, flattened; bools count as 0/1, infinities are dropped."""
    out = {}
    for key, value in flatten(data).items():
        if isinstance(value, (bool, int, float)) and not (isinstance(value, float) and math.isinf(value)):
            out[metric_key(key)] = float(value)
    return out


def metric_key(name: str) -> str:
    """MLflow keys allow letters, digits, ``_ - . / space``: ``single:a`` → ``single_a``."""
    return re.sub(r"[^\w\-./ ]", "_", name)


def _dump(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if hasattr(params, "model_dump"):
        return dict(params.model_dump(mode="json"))
    return dict(params)


def _param_value(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text[:6000]  # MLflow's param value limit


# -- the run handle ----------------------------------------------------------------------------

def _quiet(fn: F) -> F:
    """Run a tracking call; on any failure warn once per call and carry on (never raise)."""

    @functools.wraps(fn)
    def wrapper(self: Tracker, *args: Any, **kwargs: Any) -> Any:
        if self._client is None:
            return None
        try:
            return fn(self, *args, **kwargs)
        except Exception as exc:  # tracking must never break a stage
            log.warning("MLflow tracking: %s failed (%s: %s); the stage continues",
                        fn.__name__, type(exc).__name__, exc)
            return None

    return wrapper  # type: ignore[return-value]


class Tracker:
    """One MLflow run (a stage, or the pipeline parent). Inert when tracking is off or broken."""

    def __init__(self, client: Any = None, run_id: str | None = None, experiment_id: str | None = None,
                 key: str = "", parent_run_id: str | None = None, stage: str = "") -> None:
        self._client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.key = key
        self.parent_run_id = parent_run_id
        self.stage = stage

    @property
    def active(self) -> bool:
        return self._client is not None

    @_quiet
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None, run_id: str | None = None) -> None:
        """The numeric values of ``metrics`` (nested dicts flattened with dots); others are skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step or 0) for k, v in numeric(metrics).items()]
        for i in range(0, len(items), 1000):
            self._client.log_batch(run_id or self.run_id, metrics=items[i:i + 1000])

    def log_round(self, m: Any) -> None:
        """Every numeric field of a ``RoundMetrics`` (or its ``to_dict()``), at ``step=round``."""
        d = m.to_dict() if hasattr(m, "to_dict") else dict(m)
        self.log_metrics({k: v for k, v in d.items() if k != "round"}, step=int(d.get("round", 0)))

    @_quiet
    def log_curve(self, key: str, values: list[float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(metric_key(key), float(v), now, i) for i, v in enumerate(values, 1)]
        for i in range(0, len(items), 1000):
            self._client.log_batch(self.run_id, metrics=items[i:i + 1000])

    @_quiet
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for k, v in tags.items():
            self._client.set_tag(self.run_id, k, str(v))

    @_quiet
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file or folder; missing paths are skipped silently (optional outputs)."""
        p = Path(path)
        if p.is_dir():
            self._client.log_artifacts(self.run_id, str(p), artifact_path)
        elif p.exists():
            self._client.log_artifact(self.run_id, str(p), artifact_path)

    def log_pool(self, path: str | Path) -> None:
        """The executor pool YAML the stage used, under ``executors/``."""
        self.log_artifact(path, "executors")

    @_quiet
    def log_policy(self, policy_dir: str | Path, name: str = "policy") -> str | None:
        """The ``save_pretrained`` folder as an MLflow logged model linked to this run; its id."""
        from mlflow.entities import LoggedModelOutput

        folder = Path(policy_dir)
        meta_path = folder / "e3orch_policy.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        model_params = {k: _param_value(v) for k, v in flatten(meta).items()}
        model = self._client.create_logged_model(
            self.experiment_id, name=name, source_run_id=self.run_id, model_type="e3orch-policy",
            params=dict(list(model_params.items())[:_PARAMS_PER_BATCH]),
            tags={KEY_TAG: self.key, STAGE_TAG: self.stage, "e3orch.path": str(folder)},
        )
        try:
            self._client.log_model_artifacts(model.model_id, str(folder))
        except Exception:
            self._client.finalize_logged_model(model.model_id, "FAILED")
            raise
        self._client.finalize_logged_model(model.model_id, "READY")
        self._client.log_outputs(self.run_id, [LoggedModelOutput(model.model_id, 0)])
        self._client.set_tag(self.run_id, f"e3orch.model.{name}", model.model_id)
        return str(model.model_id)

    def log_evaluation(self, metrics: Mapping[str, Any], out_dir: str | Path, headline: str = "e3orch") -> None:
        """reports/: the files, one nested ``system:<name>`` run per system, headline metrics.

        Each system run carries ``accuracy, cost, makespan_s, ie, n`` (and the other numbers of
        its row) for the default pool, ``transfer_*`` for the transfer pool, ``generated_*`` for the
        generated pools together and
        ``<benchmark>_accuracy`` / ``<benchmark>_cost`` per benchmark. The ``headline`` system's
        numbers also go onto this run and the pipeline parent, so parents compare across
        experiments, with ``targets_met`` / ``targets_judged`` (the training targets of
        ``metrics["targets"]``) when it is ``e3orch``.
        """
        out = Path(out_dir)
        for name in ("metrics.json", "report.md"):
            self.log_artifact(out / name)
        for png in sorted(out.glob("*.png")):
            self.log_artifact(png, "plots")
        systems = metrics.get("systems", {})
        transfer = metrics.get("transfer", {}).get("systems", {})
        generated = metrics.get("generated", {}).get("systems", {})
        per_bench = metrics.get("per_benchmark", {})
        for name in dict.fromkeys([*systems, *transfer]):
            row = dict(systems.get(name, {}))
            row.update({f"transfer_{k}": v for k, v in transfer.get(name, {}).items()})
            row.update({f"generated_{k}": v for k, v in generated.get(name, {}).items()})
            for bench, by_system in per_bench.items():
                for k, v in by_system.get(name, {}).items():
                    row[f"{bench}_{k}"] = v
            self._system_run(name, row)
            if name == headline:
                head = {k: row[k] for k in (*HEADLINE, *(f"{p}_{h}" for p in ("transfer", "generated") for h in HEADLINE))
                        if k in row}
                targets = metrics.get("targets") or {}
                if targets.get("judged") and headline == "e3orch":  # the training targets met (e3orch/evaluation/targets.py)
                    head = {**head, "targets_met": targets["met"], "targets_judged": targets["judged"]}
                self.log_metrics(head)
                if self.parent_run_id:
                    self.log_metrics(head, run_id=self.parent_run_id)

    @_quiet
    def _system_run(self, name: str, row: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric, RunTag

        run = self._client.create_run(self.experiment_id, run_name=f"system:{name}", tags={
            PARENT_TAG: self.run_id, ROLE_TAG: "system", KEY_TAG: self.key, "e3orch.system": name,
        })
        now = int(time.time() * 1000)
        self._client.log_batch(run.info.run_id, metrics=[Metric(k, v, now, 0) for k, v in numeric(row).items()],
                               tags=[RunTag(STAGE_TAG, self.stage)])
        self._client.set_terminated(run.info.run_id, "FINISHED")

    @_quiet
    def _log_params(self, params: Any) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_value(v)) for k, v in flatten(_dump(params)).items()]
        for i in range(0, len(items), _PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=items[i:i + _PARAMS_PER_BATCH])

    @_quiet
    def _set_status(self, status: str, run_id: str | None = None) -> None:
        if status == "RUNNING":
            self._client.update_run(run_id or self.run_id, status="RUNNING")
        else:
            self._client.set_terminated(run_id or self.run_id, status)


# -- opening runs ------------------------------------------------------------------------------

def _client_and_experiment() -> tuple[Any, str]:
    from mlflow import MlflowClient

    # A tracking server that is down must cost seconds, not the client's default minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    uri = tracking_uri()
    client = MlflowClient(tracking_uri=uri)
    name = os.environ.get(ENV_EXPERIMENT) or DEFAULT_EXPERIMENT
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return client, exp.experiment_id
    try:
        return client, client.create_experiment(name, artifact_location=artifact_location(uri))
    except Exception:  # created meanwhile by a concurrent stage
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return client, exp.experiment_id


def _context_tags(extra: Mapping[str, str]) -> dict[str, str]:
    try:
        from mlflow.tracking.context.registry import resolve_tags

        return dict(resolve_tags(dict(extra)))
    except Exception:
        return dict(extra)


def _new_run(client: Any, experiment_id: str, name: str, tags: Mapping[str, str], params: Any,
             key: str, stage: str, parent: str | None) -> Tracker:
    run = client.create_run(experiment_id, run_name=name, tags=_context_tags(tags))
    tracker = Tracker(client, run.info.run_id, experiment_id, key, parent, stage)
    tracker._log_params(params)
    return tracker


def _find_or_create_parent(client: Any, experiment_id: str, params: Any, key: str) -> str:
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}' and tags.`{ROLE_TAG}` = 'pipeline'",
        max_results=1, order_by=["attributes.start_time DESC"],
    )
    if found:
        return str(found[0].info.run_id)
    exp_name = os.environ.get("DVC_EXP_NAME")
    tags = {ROLE_TAG: "pipeline", KEY_TAG: key, **({"dvc.exp_name": exp_name} if exp_name else {})}
    parent = _new_run(client, experiment_id, exp_name or f"pipeline-{key[:8]}", tags, params, key, "", None)
    return str(parent.run_id)


def start_stage(stage: str, params: Any, *, parent_run_id: str | None = None, run_name: str | None = None,
                tags: Mapping[str, Any] | None = None) -> tuple[Tracker, bool]:
    """Open the stage's run under its parent; ``(tracker, owns_parent)``. Never raises. In a
    multi-process launch only the main process opens one; the others get a tracker that logs nothing."""
    if not enabled() or not is_main_process():
        return Tracker(), False
    try:
        client, experiment_id = _client_and_experiment()
        key = pipeline_key(params)
        explicit = parent_run_id or os.environ.get(ENV_PARENT) or None
        parent = explicit or _find_or_create_parent(client, experiment_id, params, key)
        all_tags = {PARENT_TAG: parent, ROLE_TAG: "stage", STAGE_TAG: stage, KEY_TAG: key,
                    **{k: str(v) for k, v in (tags or {}).items()}}
        tracker = _new_run(client, experiment_id, run_name or stage, all_tags, params, key, stage, parent)
    except Exception as exc:
        log.warning("MLflow tracking is off for stage %s: %s: %s", stage, type(exc).__name__, exc)
        return Tracker(), False
    if not explicit:
        tracker._set_status("RUNNING", parent)  # the parent shows the state of its latest stage
    return tracker, not explicit


@contextmanager
def stage_run(stage: str, params: Any, *, parent_run_id: str | None = None, run_name: str | None = None,
              tags: Mapping[str, Any] | None = None) -> Iterator[Tracker]:
    """A nested MLflow run around one stage; FINISHED, or FAILED when the stage raises.

    Parent: ``parent_run_id``, else ``$E3ORCH_PIPELINE_RUN_ID``, else the run tagged with this
    params' pipeline key (created on first use).
    """
    tracker, owns_parent = start_stage(stage, params, parent_run_id=parent_run_id, run_name=run_name, tags=tags)
    status = "FAILED"
    try:
        yield tracker
        status = "FINISHED"
    finally:
        tracker._set_status(status)
        if owns_parent and tracker.parent_run_id:
            tracker._set_status(status, tracker.parent_run_id)


@contextmanager
def pipeline_run(params: Any, *, run_name: str | None = None, tags: Mapping[str, Any] | None = None) -> Iterator[str | None]:
    """A new parent run for one pipeline execution (the Prefect flow); yields its id (None when off).

    While open, ``$E3ORCH_PIPELINE_RUN_ID`` names it, so stages started in this process nest
    under it; pass the id explicitly to work that runs elsewhere (Ray workers).
    """
    tracker = Tracker()
    if enabled():
        try:
            client, experiment_id = _client_and_experiment()
            key = pipeline_key(params)
            all_tags = {ROLE_TAG: "pipeline", KEY_TAG: key, **{k: str(v) for k, v in (tags or {}).items()}}
            tracker = _new_run(client, experiment_id, run_name or f"pipeline-{key[:8]}", all_tags, params, key, "", None)
        except Exception as exc:
            log.warning("MLflow tracking is off for this pipeline run: %s: %s", type(exc).__name__, exc)
    previous = os.environ.get(ENV_PARENT)
    if tracker.run_id:
        os.environ[ENV_PARENT] = tracker.run_id
    status = "FAILED"
    try:
        yield tracker.run_id
        status = "FINISHED"
    finally:
        if tracker.run_id:
            if previous is None:
                os.environ.pop(ENV_PARENT, None)
            else:
                os.environ[ENV_PARENT] = previous
        tracker._set_status(status)
