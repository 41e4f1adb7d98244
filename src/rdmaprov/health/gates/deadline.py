"""How long an all_reduce sweep may take: scaled to the link it runs over, so a fabric that cannot
carry the sweep (packet loss, a flapping port) gets its verdict in minutes, not after timeout_s on
every attempt.

The sweep moves a known amount of data: a ring allreduce sends 2(n-1)/n × size per rank per
iteration, over every size from min_bytes to max_bytes by doubling. At the slowest measured
ib_write_bw pair, or at the pass threshold when that is faster, that is the transfer time; the
deadline allows for startup and a run SLOWDOWN times slower, never past timeout_s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rdmaprov.health.gates.result import GateResult

# mpirun's launch, NCCL's (or MPI's) setup, and the CUDA or probe start on every rank.
STARTUP_S = 120
# How much slower than the link the data may move before the run counts as stuck: small sizes are
# latency-bound, and a healthy fabric is within a factor of a few of ib_write_bw.
SLOWDOWN = 10
# Timed, warmup and check iterations per size: nccl-tests runs -n 20 after up to 5 warmups, plus
# one checked iteration (-c 1); the CPU probe runs 5 after 1 warmup and checks those.
ITERATIONS = {"nccl-tests": 20 + 5 + 1, "cpu-probe": 5 + 1}


@dataclass(frozen=True)
class Deadline:
    seconds: int
    arithmetic: str  # how `seconds` was worked out, for the reason a timed-out gate gives

    def __str__(self) -> str:
        return f"{self.seconds} s ({self.arithmetic})"


def sweep_sizes(low: int, high: int) -> list[int]:
    """The sizes of a sweep from `low` to `high` by doubling (nccl-tests' -b/-e/-f 2)."""
    sizes, size = [], max(low, 1)
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes


def bytes_per_rank(low: int, high: int, ranks: int, iterations: int) -> float:
    """What each rank sends over the whole sweep (ring allreduce: 2(n-1)/n × size per iteration)."""
    return 2 * (ranks - 1) / ranks * sum(sweep_sizes(low, high)) * iterations


def slowest_link(pairs: list[GateResult], hosts: list[str]) -> tuple[float, str] | None:
    """The lowest ib_write_bw measurement between two of `hosts` (Gb/s) and its pair."""
    measured = [
        (r.measured, str(r.subject))
        for r in pairs
        if r.gate == "ib_write_bw" and r.measured and all(h in hosts for h in r.hosts)
    ]
    return min(measured) if measured else None


def sweep_deadline(
    timeout_s: int, per_rank: float, link: tuple[float, str] | None, threshold_gbs: float | None
) -> Deadline:
    """The deadline of a sweep that sends `per_rank` bytes from each rank, at the faster of the
    measured link and the pass threshold: a run SLOWDOWN times slower than a healthy link is cut,
    and over a link slower than the threshold (loss, a degraded port) the run cannot pass, so it
    gets SLOWDOWN times what a passing run would take, not the slow link's much longer time."""
    rates = []
    if link is not None:
        rates.append((link[0], f"the slowest ib_write_bw pair, {link[1]}"))
    if threshold_gbs:
        rates.append((threshold_gbs * 8, f"the pass threshold, {threshold_gbs:.4g} GB/s busbw"))
    if not rates:
        return Deadline(timeout_s, "timeout_s: no measured link or threshold to scale it to")
    gbps, source = max(rates)
    transfer = per_rank * 8 / (gbps * 1e9)
    wanted = math.ceil(STARTUP_S + SLOWDOWN * transfer)
    arithmetic = (
        f"{STARTUP_S} s to start + {SLOWDOWN} × {transfer:.3g} s to send {per_rank / 1e6:.4g} MB per rank "
        f"at {gbps:.4g} Gb/s, {source}"
    )
    if wanted >= timeout_s:
        return Deadline(timeout_s, f"timeout_s, below {arithmetic}")
    return Deadline(wanted, arithmetic)
