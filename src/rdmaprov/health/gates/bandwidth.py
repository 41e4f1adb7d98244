"""Bus bandwidth and verdicts (nccl-tests PERFORMANCE.md), shared by the NCCL and CPU allreduce gates.

algbw = bytes / time; allreduce busbw = algbw × 2(n−1)/n, which makes the figure comparable to
the per-node NIC bandwidth whatever the rank count. 1 GB/s here is 10⁹ bytes/s, as nccl-tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def algbw_gbs(size_bytes: int, time_us: float) -> float:
    return size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


def allreduce_busbw_gbs(size_bytes: int, time_us: float, ranks: int) -> float:
    return algbw_gbs(size_bytes, time_us) * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def gbps_to_gbs(gbps: float) -> float:
    """Link rate in Gb/s → GB/s (25 Gb/s NIC = 3.125 GB/s)."""
    return gbps / 8


_SIZE = re.compile(r"^(\d+)([KMG]?)$")


def parse_size(text: str) -> int:
    """'4M' → 4194304 (binary multiples, as nccl-tests' -b/-e)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"size {text!r} is not a number with an optional K, M or G suffix")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


@dataclass(frozen=True)
class Verdict:
    """Pass or fail, the figure, the threshold it was held to, and a sentence saying why."""

    passed: bool
    measured: float
    threshold: float
    unit: str
    reason: str


def judge(measured: float, unit: str, *, minimum: float | None, fraction: float, reference: float | None, what: str) -> Verdict:
    """Hold `measured` to an absolute minimum, else to fraction × reference (e.g. the NIC's rate)."""
    if minimum is not None:
        threshold = minimum
        basis = f"the inventory's minimum {minimum:g} {unit}"
    elif reference is not None:
        threshold = fraction * reference
        basis = f"{fraction:.0%} of {what} {reference:g} {unit}"
    else:
        return Verdict(False, measured, 0.0, unit, "no threshold: declare rdma.rate_gbps for the nodes or an absolute minimum in cluster.gates")
    passed = measured >= threshold
    share = f" ({measured / reference:.1%} of {what})" if reference else ""
    reason = f"{measured:.4g} {unit}{share} {'>=' if passed else '<'} {threshold:.4g} {unit} ({basis})"
    return Verdict(passed, measured, threshold, unit, reason)
