"""A large Slurm fleet in `scontrol -o show node`'s own format: the lab's real node line (Slurm
22.05.8, tests/fixtures/slurm) with each node's own name, address, state and reason. One node in
a hundred is drained by rdmaprov's check, one by an admin, one is down and not responding. And
how the tests with a running Slurm (the lab's, the twins') read its nodes' states."""

from __future__ import annotations

import re

from tests.conftest import FIXTURES

LAB = (FIXTURES / "slurm" / "scontrol_show_node_lab_node2_drained_by_rdmaprov.txt").read_text()
# Each node's state and reason, a line each, as the tests read them on a controller.
SINFO = "sinfo -h -N -o '%N|%T|%E'"


def sinfo_states(out: str) -> dict[str, tuple[str, str]]:
    """{node: (state, reason)} from SINFO's output."""
    return {n: (s, r) for n, s, r in (line.split("|", 2) for line in out.splitlines() if line.count("|") == 2)}


def _state(i: int) -> tuple[str, str]:
    if i % 100 == 10:
        return "IDLE+DRAIN", f"rdmaprov: rdma.port_state mlx5_{i % 8} port 1: DOWN [root@2026-11-23T20:33:49]"
    if i % 100 == 20:
        return "IDLE+DRAIN", "DIMM swap, ticket 4711 [root@2026-11-22T09:00:00]"
    if i % 100 == 30:
        return "DOWN+NOT_RESPONDING", "Not responding [slurm@2026-11-23T18:00:00]"
    return "IDLE", ""


def scontrol_nodes(count: int) -> str:
    """`count` nodes, node1 … nodeN, as `scontrol -o show node` prints them."""
    [template] = [line for line in LAB.splitlines() if line.startswith("NodeName=node2 ")]
    head = template[: template.index(" Reason=")]
    lines = []
    for i in range(1, count + 1):
        line = head.replace("NodeName=node2 ", f"NodeName=node{i} ").replace(
            "NodeHostName=node2 ", f"NodeHostName=node{i} "
        )
        line = re.sub(r"NodeAddr=\S+", f"NodeAddr=10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}", line)
        state, reason = _state(i)
        line = line.replace("State=IDLE+DRAIN ", f"State={state} ")
        lines.append(f"{line} Reason={reason}" if reason else line)
    return "\n".join(lines) + "\n"
