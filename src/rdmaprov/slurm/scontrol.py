"""The drain etiquette on the node (what `node-check --slurm`, Slurm's HealthCheckProgram, does
after the checks): read this node's Slurm state, and the partitions' when it may have to drain,
act through `scontrol update`, and after a drain read again and undo it when other nodes drained
at the same moment past the limit (slurm/drain.py says why that bounds the race).

Every scontrol call has its own deadline. A call that fails or does not answer ends the etiquette
with a line saying so and nothing else done: Slurm's own trouble must never drain a node.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence

from rdmaprov.parsers.slurm import parse_scontrol_nodes
from rdmaprov.slurm.drain import CheckOutcome, DrainLimits, SlurmNode, decide, excess_drains

TIMEOUT_S = 10
# Before reading the state again after a drain: racing drains within this window get committed first.
SETTLE_S = 1.0
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmUnavailable(Exception):
    """scontrol could not be run, failed, or did not answer in time."""


def scontrol(*args: str) -> str:
    try:
        proc = subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=dict(os.environ, PATH=_PATH),
        )
    except FileNotFoundError:
        raise SlurmUnavailable("scontrol is not installed on this node") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"scontrol {' '.join(args[:2])} did not answer within {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise SlurmUnavailable(f"scontrol {' '.join(args[:2])} failed: {last}")
    return proc.stdout


def _nodes(name: str | None = None) -> list[SlurmNode]:
    return parse_scontrol_nodes(scontrol("-o", "show", "node", *([name] if name else [])))


def etiquette(outcome: CheckOutcome, limits: DrainLimits) -> list[str]:
    """Drain, resume or report this node after its check; the lines say what was done."""
    try:
        mine = _nodes(outcome.node)
        ours = bool(mine) and mine[0].by_rdmaprov
        if outcome.healthy and not ours:
            return []  # in service (or someone else's): nothing to do, no cluster-wide read
        nodes = _nodes() if not outcome.healthy and outcome.conclusive and mine and not mine[0].drained else mine
        lines = []
        for action in decide(nodes, [outcome], limits):
            command = action.command()
            if command:
                scontrol(*command[1:])
            lines.append(str(action))
            if action.kind == "drain":
                lines += _undo_if_over(outcome.node, limits)
        return lines
    except SlurmUnavailable as exc:
        return [f"slurm: nothing done to {outcome.node}: {exc}"]


def _undo_if_over(node: str, limits: DrainLimits) -> list[str]:
    time.sleep(SETTLE_S)
    over = excess_drains(_nodes(), node, limits)
    if not over:
        return []
    scontrol("update", f"nodename={node}", "state=resume")
    return [f"slurm: undid the drain of {node}, other nodes were drained at the same time: {'; '.join(over)}"]


def outcome_of(node: str, failures: Sequence[str], conclusive: bool) -> CheckOutcome:
    return CheckOutcome(node, not failures and conclusive, tuple(failures), conclusive)
