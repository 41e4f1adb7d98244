"""Inputs the loader and the Ansible import once accepted and must refuse (issue #30, item 7): each
is refused with the file, line and column, the setting's path and a fix, before anything connects."""

from __future__ import annotations

import pytest

from tests.support.inventories import problems, write

HOST = "hosts:\n  n1: {}\n  n2: {}\n"
FINITE_FIX = "(fix: write a finite number; quote the value if it is text)"


# --- 1. every number is finite --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "position", "path", "read_as"),
    [
        (
            "cluster:\n  name: c\n  slurm:\n    enabled: true\n    mode: health_check\n"
            "    health_check: {max_drain_fraction: .nan}\n",
            "6:40",
            "cluster.slurm.health_check.max_drain_fraction",
            "not-a-number (.nan)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    all_reduce: {fraction: .NaN}\n",
            "4:28",
            "cluster.gates.all_reduce.fraction",
            "not-a-number (.nan)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    ib_write_bw: {max_fraction: .inf}\n",
            "4:33",
            "cluster.gates.ib_write_bw.max_fraction",
            "infinity (.inf)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    latency: {max_p99_us: 1.0e+400}\n",
            "4:27",
            "cluster.gates.latency.max_p99_us",
            "infinity (.inf)",
        ),
        (
            "cluster: {name: c}\ndefaults:\n  rdma: {rate_gbps: -.inf}\n",
            "3:21",
            "defaults.rdma.rate_gbps",
            "minus infinity (-.inf)",
        ),
    ],
    ids=["max_drain_fraction", "fraction", "max_fraction", "max_p99_us", "rate_gbps"],
)
def test_nan_and_infinity_are_refused_in_every_setting(tmp_path, settings, position, path, read_as):
    """NaN compares false with everything, so the schema's ranges let it through (a NaN share of
    nodes to drain, a NaN upper bound that checks nothing), and infinity is no threshold: one walk
    over the document refuses both wherever they are, in one message (minus infinity was refused
    before, as out of range of a lower bound)."""
    text = settings + (HOST if "hosts:" not in settings else "")
    inventory = write(tmp_path, text)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:{position}: {path}: YAML reads this value as {read_as}; every number in an inventory "
        f"must be finite {FINITE_FIX}"
    ]
