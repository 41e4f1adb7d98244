"""A gate's outcome: the verdict, the figure, and enough output to see why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict

from rdmaprov.engine.session import HostLost
from rdmaprov.health.gates.bandwidth import Verdict
from rdmaprov.health.gates.subject import Subject

# Gates that judge one job across the nodes: a failure is the job's, not one named node's.
JOB_GATES = frozenset({"all_reduce", "workload"})


class BaselineSummary(TypedDict):
    """A result's part against its own past (health/baselines.py), as the run's JSON carries it:
    the baseline (None while recording), over how many runs and since when, this figure's change
    against it (a fraction, rounded) and whether that is a drift."""

    value: float | None
    runs: int
    since: str | None
    change: float | None
    drift: bool


@dataclass
class GateResult:
    gate: str  # node, ib_write_bw, container, container_latency, rail, latency, incast, all_reduce, workload
    subject: Subject  # the node, the pair (in containers too; a rail: its HCAs), or the job's nodes
    passed: bool
    reason: str
    measured: float | None = None
    threshold: float | None = None
    unit: str = ""
    attempts: int = 1
    details: dict[str, object] = field(default_factory=dict)  # the gate's own, for the JSON and the report
    status: str = ""  # pass, warn (passed, below the warning level), skipped (nothing to test) or fail
    expected: float | None = None  # the line rate the figure is measured against, where known
    baseline: BaselineSummary | None = None  # this part's own past (health/baselines.py), once it has one
    duration_s: float | None = None  # how long the test took (the pair's, for rails)

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "pass" if self.passed else "fail"

    @classmethod
    def of(
        cls, gate: str, subject: Subject, verdict: Verdict, attempts: int = 1, details: dict[str, object] | None = None
    ) -> GateResult:
        return cls(
            gate,
            subject,
            verdict.passed,
            verdict.reason,
            verdict.measured,
            verdict.threshold,
            verdict.unit,
            attempts,
            details or {},
            verdict.status,
            verdict.expected,
        )

    @classmethod
    def broken(cls, gate: str, subject: Subject, error: BaseException) -> GateResult:
        """The failure of a test that raised instead of giving a verdict: a host lost on the way
        (engine/session.HostLost) is named with when and where, not reported as a crash."""
        if isinstance(error, HostLost):
            return cls(gate, subject, False, f"not judged: {error}", details={"lost": error.host})
        return cls(gate, subject, False, f"gate crashed: {error}")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "subject": str(self.subject)}

    @property
    def hosts(self) -> list[str]:
        return self.subject.hosts
