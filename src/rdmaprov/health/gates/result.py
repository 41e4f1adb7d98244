"""A gate's outcome: the verdict, the figure, and enough output to see why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rdmaprov.health.gates.bandwidth import Verdict


@dataclass
class GateResult:
    gate: str  # "node", "ib_write_bw" or "all_reduce"
    subject: str  # the node, "node1 -> node2", or the hosts of an all_reduce
    passed: bool
    reason: str
    measured: float | None = None
    threshold: float | None = None
    unit: str = ""
    attempts: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    status: str = ""  # pass, warn (passed, below the warning level), skipped (nothing to test) or fail
    expected: float | None = None  # the line rate the figure is measured against, where known

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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
