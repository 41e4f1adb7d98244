"""The all_reduce gate's deadline: worked out from the sweep and the measured link, shown as sums."""

from __future__ import annotations

import math

from rdmaprov.health.gates.deadline import (
    ITERATIONS,
    SLOWDOWN,
    STARTUP_S,
    bytes_per_rank,
    slowest_link,
    sweep_deadline,
    sweep_sizes,
)
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject

MIB = 1 << 20


def _pair(subject: str, gbps: float | None) -> GateResult:
    return GateResult("ib_write_bw", Subject.parse(subject), gbps is not None, "", gbps, unit="Gb/s")


def test_the_sweep_and_what_each_rank_sends():
    assert sweep_sizes(MIB, 4 * MIB) == [MIB, 2 * MIB, 4 * MIB]
    assert sweep_sizes(3, 10) == [3, 6]
    # 2 ranks: each sends 2(n-1)/n = 1 × the size per iteration; the lab's probe sweep
    assert bytes_per_rank(MIB, 4 * MIB, 2, ITERATIONS["cpu-probe"]) == 7 * MIB * 6
    # 16 ranks: 2 × 15/16 of the size
    assert bytes_per_rank(MIB, MIB, 16, 1) == 2 * 15 / 16 * MIB


def test_the_slowest_measured_pair_among_the_gates_hosts():
    pairs = [_pair("node1 -> node2", 0.1), _pair("node2 -> node3", 0.05), _pair("node3 -> node1", None)]
    assert slowest_link(pairs, ["node1", "node2", "node3"]) == (0.05, "node2 -> node3")
    assert slowest_link(pairs, ["node1", "node2"]) == (0.1, "node1 -> node2")  # node3 is not in this run
    assert slowest_link([_pair("node1 -> node2", None)], ["node1", "node2"]) is None


def test_deadline_over_the_measured_link_shows_its_arithmetic():
    per_rank = bytes_per_rank(MIB, 4 * MIB, 2, ITERATIONS["cpu-probe"])  # 44 MB
    deadline = sweep_deadline(900, per_rank, (0.1, "node1 -> node2"), None)
    transfer = per_rank * 8 / 0.1e9
    assert deadline.seconds == math.ceil(STARTUP_S + SLOWDOWN * transfer)
    assert 150 < deadline.seconds < 160  # the lab: ~3.5 s of data at 0.1 Gb/s, not 900 s
    assert str(deadline) == (
        f"{deadline.seconds} s (120 s to start + 10 × 3.52 s to send 44.04 MB per rank at 0.1 Gb/s, "
        "the slowest ib_write_bw pair, node1 -> node2)"
    )


def test_over_a_link_slower_than_the_threshold_the_deadline_is_what_a_passing_run_would_take():
    per_rank = bytes_per_rank(MIB, 512 * MIB, 16, ITERATIONS["nccl-tests"])  # 51 GB
    healthy = sweep_deadline(900, per_rank, (390.0, "node1 -> node2"), 45.0)  # 0.9 × 400 Gb/s ÷ 8
    assert healthy.seconds == math.ceil(STARTUP_S + SLOWDOWN * per_rank * 8 / 390e9) == 131
    lossy = sweep_deadline(900, per_rank, (2.0, "node1 -> node2"), 45.0)
    assert lossy.seconds == math.ceil(STARTUP_S + SLOWDOWN * per_rank * 8 / 360e9) == 132
    assert lossy.arithmetic.endswith("at 360 Gb/s, the pass threshold, 45 GB/s busbw")
    assert sweep_deadline(900, per_rank, None, 45.0).seconds == 132  # the pair gate off or without a figure
    assert sweep_deadline(900, per_rank, None, None).seconds == 900
    capped = sweep_deadline(300, per_rank, (0.01, "a -> b"), None)
    assert capped.seconds == 300 and capped.arithmetic.startswith("timeout_s, below 120 s to start + 10 ×")
