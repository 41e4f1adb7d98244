"""A gate's outcome: the verdict, the figure, and enough output to see why."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from rdmaprov.engine.session import HostLost
from rdmaprov.health.gates.bandwidth import Verdict

# Gates that judge one job across the nodes: a failure is the job's, not one named node's.
JOB_GATES = frozenset({"all_reduce", "workload"})


@dataclass
class GateResult:
    gate: str  # "node", "ib_write_bw", "container", "rail", "latency", "all_reduce" or "workload"
    # the node, "node1 -> node2" (a pair, in containers too), "node1:mlx5_0 -> node2:mlx5_0" (a
    # rail), or "node1,node2" (a job)
    subject: str
    passed: bool
    reason: str
    measured: float | None = None
    threshold: float | None = None
    unit: str = ""
    attempts: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    status: str = ""  # pass, warn (passed, below the warning level), skipped (nothing to test) or fail
    expected: float | None = None  # the line rate the figure is measured against, where known
    baseline: dict[str, Any] | None = None  # this part's own past (health/baselines.py), once it has one
    duration_s: float | None = None  # how long the test took (the pair's, for rails)

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "pass" if self.passed else "fail"

    @classmethod
    def of(
        cls, gate: str, subject: str, verdict: Verdict, attempts: int = 1, details: dict[str, Any] | None = None
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
    def broken(cls, gate: str, subject: str, error: BaseException) -> GateResult:
        """The failure of a test that raised instead of giving a verdict: a host lost on the way
        (engine/session.HostLost) is named with when and where, not reported as a crash."""
        if isinstance(error, HostLost):
            return cls(gate, subject, False, f"not judged: {error}", details={"lost": error.host})
        return cls(gate, subject, False, f"gate crashed: {error}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def hosts(self) -> list[str]:
        return subject_hosts(self.subject)


def subject_hosts(subject: str) -> list[str]:
    """The nodes a result is about, from its subject: "a", "a -> b", "a:mlx5_0 -> b:mlx5_0",
    "a -> b rail 3", "a,b,c" (host names hold no spaces, commas or colons)."""
    parts = re.split(r" -> |,", subject.split(" rail ")[0])
    return [part.split(":")[0].strip() for part in parts if part.strip()]
