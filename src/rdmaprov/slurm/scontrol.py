"""The drain etiquette on the node (what `node-check --slurm`, Slurm's HealthCheckProgram, does
after the checks): read this node's Slurm state, and the partitions' when it may have to drain,
act through `scontrol update`, and after a drain read again and undo it when other nodes drained
at the same moment past the limit (slurm/drain.py says why that bounds the race).

Every scontrol call has its own deadline, within the health check's (slurmd kills the program at
60 s, or at HealthCheckTimeout from Slurm 26.05: the expectations file carries the budget). A
call that fails or does not answer ends the etiquette with a line saying so and nothing more
done: Slurm's own trouble must never drain a node. A drain is only started with time left
to read the share again and undo it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence

from rdmaprov.inventory.slurm import BEFORE_TIMEOUT
from rdmaprov.parsers.slurm import parse_scontrol_nodes
from rdmaprov.paths import SYSTEM_PATH
from rdmaprov.slurm.drain import CheckOutcome, DrainLimits, SlurmNode, decide, excess_drains

# How long one scontrol call may take: 10 s within slurmd's 60 s of old; a fifth of a shorter
# budget (Slurm 26.05's HealthCheckTimeout kept below a short interval), never under 2 s, so that a
# drain's calls still fit where the check has less time (a healthy controller answers in well under
# a second; the limit is for one that hangs).
TIMEOUT_S = 10
MIN_CALL_S = 2.0
# Before reading the state again after a drain: racing drains within this window get committed first.
SETTLE_S = 1.0
# The check's own time where its expectations do not say (slurmd's fixed 60 s before 26.05)
BUDGET_S = float(BEFORE_TIMEOUT.budget_s)


class SlurmUnavailable(Exception):
    """scontrol could not be run, failed, or did not answer in time."""


class Clock:
    """The time left of the health check: every scontrol call ends within it."""

    def __init__(self, started: float, budget_s: float = BUDGET_S) -> None:
        self.deadline = started + budget_s
        self.budget_s = budget_s
        self.call_s = max(MIN_CALL_S, min(float(TIMEOUT_S), budget_s / 5))

    @property
    def drain_needs_s(self) -> float:
        """A drain is three calls (drain, re-read, undo) and the settle: what must be left of the time."""
        return 3 * self.call_s + SETTLE_S

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def call_timeout(self) -> float:
        left = self.left()
        if left <= 0:
            raise SlurmUnavailable(f"no time left of the health check's {self.budget_s:g} s")
        return min(self.call_s, left)


def scontrol(clock: Clock, *args: str) -> str:
    timeout = clock.call_timeout()
    try:
        proc = subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            # the reason's stamp parsed as Slurm writes it by default, whatever the caller's format
            env=dict(os.environ, PATH=SYSTEM_PATH, SLURM_TIME_FORMAT="standard"),
        )
    except FileNotFoundError:
        raise SlurmUnavailable("scontrol is not installed on this node") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"scontrol {' '.join(args[:2])} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise SlurmUnavailable(f"scontrol {' '.join(args[:2])} failed: {last}")
    return proc.stdout


def _nodes(clock: Clock, name: str | None = None) -> list[SlurmNode]:
    return parse_scontrol_nodes(scontrol(clock, "-o", "show", "node", *([name] if name else [])))


def etiquette(outcome: CheckOutcome, limits: DrainLimits, clock: Clock) -> list[str]:
    """Drain, resume or report this node after its check; the lines say what was done, also
    when Slurm stopped answering half-way (a drain done is never reported as nothing done)."""
    lines: list[str] = []
    try:
        mine = _nodes(clock, outcome.node)
        ours = bool(mine) and mine[0].by_rdmaprov
        if outcome.healthy and not ours:
            return []  # in service (or someone else's): nothing to do, no cluster-wide read
        drainable = not outcome.healthy and outcome.conclusive and mine and not mine[0].drained
        nodes = _nodes(clock) if drainable else mine
        for action in decide(nodes, [outcome], limits):
            if action.kind == "drain" and clock.left() < clock.drain_needs_s:
                lines.append(
                    f"slurm: {action.node} fails, not drained: {max(0.0, clock.left()):.0f} s left of the health "
                    f"check's {clock.budget_s:g} s, a drain needs {clock.drain_needs_s:g} s to be checked against "
                    "the share"
                )
                continue
            command = action.command()
            if command:
                scontrol(clock, *command[1:])
            lines.append(str(action))
            if action.kind == "drain":
                lines += _undo_if_over(clock, outcome.node, limits)
        return lines
    except SlurmUnavailable as exc:
        return [*lines, f"slurm: nothing {'more ' if lines else ''}done to {outcome.node}: {exc}"]


def _undo_if_over(clock: Clock, node: str, limits: DrainLimits) -> list[str]:
    time.sleep(SETTLE_S)
    try:
        over = excess_drains(_nodes(clock), node, limits)
        if not over:
            return []
        scontrol(clock, "update", f"nodename={node}", "state=resume")
    except SlurmUnavailable as exc:
        return [f"slurm: the share was not checked after draining {node}: {exc}"]
    return [f"slurm: undid the drain of {node}, other nodes were drained at the same time: {'; '.join(over)}"]


def outcome_of(node: str, failures: Sequence[str], conclusive: bool) -> CheckOutcome:
    return CheckOutcome(node, not failures and conclusive, tuple(failures), conclusive)
