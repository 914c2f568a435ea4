"""The Executor protocol, the pool-file schema and the executor registry.

An executor runs one subtask of a plan and always returns an :class:`ExecutionResult`;
failures (errors, timeouts, refusals) are results with ``ok=False``, never exceptions, so the
DAG scheduler can record them and the orchestrator can react.

What this module deliberately does not do: schedule, retry across executors, or know about
plans. Executors see one request at a time.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from e3orch.files import read_yaml

SKILLS: tuple[str, ...] = ("retrieve", "compute", "code", "reason")


class ConfigError(ValueError):
    """A configuration or pool file is invalid; the message names the key and the fix."""


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input_per_1k: float = Field(0.0, ge=0)
    output_per_1k: float = Field(0.0, ge=0)


class Latency(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base_s: float = Field(0.0, ge=0)
    per_1k_tokens_s: float = Field(0.0, ge=0)


class ExecutorSpec(BaseModel):
    """One entry of an executor pool file (DESIGN §5). Kind-specific fields go to ``options``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    kind: str
    description: str = ""
    price: Price = Price()
    latency: Latency = Latency()
    skills: dict[str, float] | None = None

    @field_validator("skills")
    @classmethod
    def _check_skills(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return v
        for k, p in v.items():
            if k not in SKILLS:
                raise ValueError(f"unknown skill {k!r}; known skills: {', '.join(SKILLS)}")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"skill {k!r} must be a probability in [0, 1], got {p}")
        return v

    @property
    def options(self) -> dict[str, Any]:
        """Kind-specific fields (e.g. ``base_url`` for ``openai``)."""
        return dict(self.model_extra or {})

    def card(self) -> str:
        """What the policy sees of this executor: description, price and latency, never internals."""
        return (
            f"{self.name}: {self.description.strip()} "
            f"[price in/out per 1k tokens: {self.price.input_per_1k:g}/{self.price.output_per_1k:g}; "
            f"latency ~{self.latency.base_s:g}s + {self.latency.per_1k_tokens_s:g}s/1k tokens]"
        )

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.price.input_per_1k + output_tokens * self.price.output_per_1k) / 1000.0


@dataclass(frozen=True)
class SubtaskRequest:
    """One subtask handed to an executor.

    ``context`` holds the outputs of the subtask's dependencies (id → output text), forwarded by
    the scheduler. ``task`` is the task being solved: simulated executors read its hidden
    requirement graph; real executors ignore it. ``state`` is the episode's shared solved-state
    (simulation only). ``seed`` makes stochastic executors reproducible per call.
    """

    task_id: str
    subtask_id: str
    instruction: str
    context: tuple[tuple[str, str], ...] = ()
    task: Any = None
    state: Any = None
    seed: int = 0


@dataclass
class ExecutionResult:
    """What one executor call produced. ``ok=False`` with ``error`` set on any failure."""

    id: str
    executor: str
    ok: bool
    output: str = ""
    cost: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    start_s: float = 0.0  # when it started on the plan's clock (set by the scheduler)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "executor": self.executor,
            "ok": self.ok,
            "cost": round(self.cost, 6),
            "latency_s": round(self.latency_s, 6),
            "output": self.output,
            "error": self.error,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


class Executor(abc.ABC):
    """An executor of one kind. Subclasses register with :func:`register_executor`.

    ``virtual_time`` is True for executors whose ``latency_s`` is simulated rather than
    measured (the scheduler then computes makespans from reported latencies).
    """

    kind: ClassVar[str] = ""
    virtual_time: bool = False  # per instance: a simulated executor that really sleeps is not virtual

    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    @abc.abstractmethod
    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        """Run one subtask; never raise for executor-side failures."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources (HTTP clients, models)."""

    def success(self, request: SubtaskRequest, output: str, *, input_tokens: int, output_tokens: int,
                latency_s: float, empty_is_error: bool = False) -> ExecutionResult:
        """A finished call priced from its token counts (an empty model reply can count as a failure)."""
        cost = self.spec.cost(input_tokens, output_tokens)
        ok = bool(output) or not empty_is_error
        return ExecutionResult(id=request.subtask_id, executor=self.name, ok=ok, output=output, cost=cost,
                               latency_s=latency_s, error=None if ok else "empty output",
                               input_tokens=input_tokens, output_tokens=output_tokens)

    def failure(self, request: SubtaskRequest, error: str, latency_s: float = 0.0, cost: float = 0.0) -> ExecutionResult:
        return ExecutionResult(
            id=request.subtask_id, executor=self.name, ok=False, error=error, latency_s=latency_s, cost=cost
        )


_REGISTRY: dict[str, Callable[[ExecutorSpec], Executor]] = {}
_LAZY: dict[str, str] = {
    # kind -> module that registers it, imported only when a pool uses that kind
    "simulated": "e3orch.executors.simulated",
    "calculator": "e3orch.executors.calculator",
    "python": "e3orch.executors.python_sandbox",
    "search": "e3orch.executors.search",
    "openai": "e3orch.executors.openai_compat",
    "local": "e3orch.executors.local_model",
}


def register_executor(kind: str) -> Callable[[type[Executor]], type[Executor]]:
    def deco(cls: type[Executor]) -> type[Executor]:
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls

    return deco


def executor_class(kind: str) -> Callable[[ExecutorSpec], Executor]:
    if kind not in _REGISTRY and kind in _LAZY:
        import importlib

        importlib.import_module(_LAZY[kind])
    if kind not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_LAZY))
        raise ConfigError(f"unknown executor kind {kind!r}; known kinds: {', '.join(known)}")
    return _REGISTRY[kind]


@dataclass
class Pool:
    """A pool of executors by name, built from a pool file."""

    executors: dict[str, Executor] = field(default_factory=dict)
    source: str = ""

    def __contains__(self, name: object) -> bool:
        return name in self.executors

    def __getitem__(self, name: str) -> Executor:
        return self.executors[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.executors.values())

    def __len__(self) -> int:
        return len(self.executors)

    @property
    def names(self) -> list[str]:
        return list(self.executors)

    @property
    def specs(self) -> list[ExecutorSpec]:
        return [e.spec for e in self.executors.values()]

    def cards(self) -> str:
        return "\n".join(f"- {s.card()}" for s in self.specs)

    async def aclose(self) -> None:
        for e in self.executors.values():
            await e.aclose()


def parse_pool_specs(data: Mapping[str, Any], source: str = "<pool>") -> list[ExecutorSpec]:
    if not isinstance(data, Mapping) or "executors" not in data:
        raise ConfigError(f"{source}: a pool file needs a top-level 'executors:' list")
    extra = set(data) - {"executors"}
    if extra:
        raise ConfigError(f"{source}: unknown top-level key(s) {sorted(extra)}; only 'executors' is allowed")
    items = data["executors"]
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{source}: 'executors' must be a non-empty list")
    specs: list[ExecutorSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        try:
            spec = ExecutorSpec.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = "".join(f".{p}" for p in err["loc"] if p != "__root__")
            msg = err["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{source}: executors[{i}]{loc}: {msg}") from None
        if spec.name in seen:
            raise ConfigError(f"{source}: executors[{i}].name: duplicate executor name {spec.name!r}")
        seen.add(spec.name)
        specs.append(spec)
    return specs


def load_pool_specs(path: str | Path) -> list[ExecutorSpec]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"executor pool file not found: {p} (pass --executors PATH to an existing YAML pool)")
    try:
        data = read_yaml(p)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return parse_pool_specs(data, str(p))


def build_pool(specs: Iterable[ExecutorSpec] | str | Path, source: str = "") -> Pool:
    """Build executors from specs (or a pool file path); unknown kinds fail with a clear message."""
    if isinstance(specs, (str, Path)):
        source = str(specs)
        specs = load_pool_specs(specs)
    pool = Pool(source=source)
    for i, spec in enumerate(specs):
        try:
            cls = executor_class(spec.kind)
        except ConfigError as exc:
            raise ConfigError(f"{source or 'pool'}: executors[{i}].kind: {exc}") from None
        try:
            pool.executors[spec.name] = cls(spec)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source or 'pool'}: executor {spec.name!r} ({spec.kind}): {exc}") from None
    return pool
