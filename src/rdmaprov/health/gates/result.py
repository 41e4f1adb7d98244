"""A gate's outcome: the verdict, the figure, and enough output to see why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GateResult:
    gate: str  # "ib_write_bw" or "all_reduce"
    subject: str  # "node1 -> node2", or the hosts of an all_reduce
    passed: bool
    reason: str
    measured: float | None = None
    threshold: float | None = None
    unit: str = ""
    attempts: int = 1
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
