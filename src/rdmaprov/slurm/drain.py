"""Drain etiquette: what to do with Slurm nodes given what they are in Slurm and what the node
check found — pure functions over (node states and drain reasons, check outcomes, limits).

The rules, each learnt from a field failure:
- A failing node is drained with reason `rdmaprov: <check> <found>`; a node rdmaprov drained is
  resumed once it passes again. Only a reason that starts with `rdmaprov:` is rdmaprov's.
- A node drained for any other reason is the admin's: never resumed, never re-drained, its reason
  never overwritten (NHC overwrote an admin's reason with its own, then resumed the node when it
  passed: mej/nhc#134). A node that is down, failing, powered down or rebooting is Slurm's
  business and is not touched either. One whose slurmd is starting (UNKNOWN, +NOT_RESPONDING:
  the health check slurmd runs before it registers) is drained when it fails, never resumed.
- No outcome from the check itself (a report that timed out, a Slurm command that did not answer)
  ever drains or resumes anything (NHC drained whole batches when its own `scontrol` call hung:
  mej/nhc#161). Those outcomes are reported and nothing else.
- At most `max_fraction` of a partition's nodes (at least one) may be drained by rdmaprov at once;
  failing nodes past that are reported, not drained: a check that fails everywhere at once (a
  wrong expectation, a fabric-wide event) must not take the partition down.

Where this runs: inside each node's HealthCheckProgram, which sees only its own check, so the
share limit needs the partition's state (scontrol from the node). Two nodes can decide at the same
moment; `excess_drains` is the bound: after draining, a node reads the state again and undoes its
own drain when the drains by rdmaprov in one of its partitions set no later than its own (Slurm
stamps each reason with its time) already fill the limit. Drains are stamped in the order
slurmctld commits them, so of any set of racing drains at most `limit` survive; ties within one
second undo both (under-draining is safe, the next check drains again). HealthCheckNodeState=CYCLE
spreads the nodes' checks over the interval, which makes such races rare in the first place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rdmaprov.parsers.slurm import PREFIX, SlurmNode

# Slurm keeps a reason as given; one short line reads well in sinfo -R and scontrol.
REASON_LENGTH = 160


@dataclass(frozen=True)
class CheckOutcome:
    """The node check's verdict on one Slurm node. `conclusive` is False when the check itself
    failed (its report timed out): such an outcome never drains or resumes."""

    node: str
    healthy: bool
    failures: tuple[str, ...] = ()  # "check-id subject: found", one per failed check
    conclusive: bool = True


@dataclass(frozen=True)
class DrainLimits:
    drain: bool  # False: only report
    max_fraction: float

    def allowed(self, partition_size: int) -> int:
        """How many of a partition's nodes rdmaprov may hold drained at once: the share, at least one."""
        return max(1, math.floor(self.max_fraction * partition_size + 1e-9))


@dataclass(frozen=True)
class Action:
    """What to do with one node: drain or resume (commands), or report (no command)."""

    node: str
    kind: str  # drain, resume or report
    why: str  # the drain reason, or what the report says

    def command(self) -> list[str] | None:
        """The scontrol command line (arguments, no shell), None for a report."""
        if self.kind == "drain":
            return ["scontrol", "update", f"nodename={self.node}", "state=drain", f"reason={self.why}"]
        if self.kind == "resume":
            return ["scontrol", "update", f"nodename={self.node}", "state=resume"]
        return None

    def __str__(self) -> str:
        if self.kind == "drain":
            return f"slurm: drained {self.node}: {self.why}"
        if self.kind == "resume":
            return f"slurm: resumed {self.node}: {self.why}"
        return f"slurm: {self.node} {self.why}"


# What the checks' texts use beyond ASCII, spelt for a Slurm reason.
_ASCII = {"\u2192": "->", "\u2264": "<=", "\u2265": ">=", "\u2026": "...", "\u00d7": "x", "\u00f7": "/"}


def drain_reason(failures: Sequence[str]) -> str:
    """`rdmaprov: <check> <found>` of the first failure (and how many more), on one printable
    ASCII line that scontrol takes as one argument."""
    first = failures[0] if failures else "check failed"
    for text, ascii_text in _ASCII.items():
        first = first.replace(text, ascii_text)
    first = re.sub(r"[^\x20-\x7e]", "?", first)
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    text = f"{PREFIX} {first}"
    room = REASON_LENGTH - len(more)
    return (text if len(text) <= room else text[: room - 3] + "...") + more


def _partitions(nodes: Iterable[SlurmNode]) -> dict[str, list[SlurmNode]]:
    found: dict[str, list[SlurmNode]] = {}
    for node in nodes:
        for partition in node.partitions:
            found.setdefault(partition, []).append(node)
    return found


def decide(nodes: Sequence[SlurmNode], outcomes: Sequence[CheckOutcome], limits: DrainLimits) -> list[Action]:
    """The actions for the checked nodes, in the order of `outcomes`: resumes counted before drains
    (a resumed node frees its place under the limit), drains up to each partition's limit."""
    by_name = {n.name: n for n in nodes}
    members = _partitions(nodes)
    held = {p: sum(n.by_rdmaprov for n in ns) for p, ns in members.items()}
    decided: dict[str, Action] = {}

    for outcome in outcomes:
        node = by_name.get(outcome.node)
        if node is None:
            decided[outcome.node] = Action(outcome.node, "report", "is not a node of this Slurm cluster: left alone")
        elif not outcome.conclusive:
            decided[node.name] = Action(node.name, "report", "was not judged (the check itself failed): left as it is")
        elif (state := node.hands_off) is not None and (outcome.healthy or not node.starting):
            decided[node.name] = Action(node.name, "report", f"is {state}: Slurm manages it, left alone")
        elif node.drained and not node.by_rdmaprov:
            decided[node.name] = Action(
                node.name, "report", f"was drained by someone else ({node.reason or 'no reason'}): left alone"
            )
        elif outcome.healthy and node.by_rdmaprov:
            decided[node.name] = Action(node.name, "resume", f"passes again (was: {node.reason})")
            for partition in node.partitions:
                held[partition] -= 1
    for outcome in outcomes:
        node = by_name.get(outcome.node)
        if node is None or node.name in decided or outcome.healthy:
            continue
        if node.by_rdmaprov:
            decided[node.name] = Action(node.name, "report", f"still fails, stays drained ({node.reason})")
            continue
        if not limits.drain:
            decided[node.name] = Action(node.name, "report", "fails; draining is off (slurm.health_check.drain)")
            continue
        full = [
            f"{p} has {held.get(p, 0)} of {len(members[p])} nodes drained by rdmaprov "
            f"(at most {limits.allowed(len(members[p]))})"
            for p in node.partitions
            if held.get(p, 0) + 1 > limits.allowed(len(members[p]))
        ]
        if full:
            decided[node.name] = Action(node.name, "report", "fails, not drained: partition " + "; ".join(full))
            continue
        decided[node.name] = Action(node.name, "drain", drain_reason(outcome.failures))
        for partition in node.partitions:
            held[partition] = held.get(partition, 0) + 1
    return [decided[o.node] for o in outcomes if o.node in decided]


def excess_drains(nodes: Sequence[SlurmNode], node: str, limits: DrainLimits) -> list[str]:
    """Read again after `node` was drained: the partitions where rdmaprov's drains set no later than
    `node`'s (itself included) exceed the limit; non-empty means `node` must undo its drain. A drain
    whose time could not be read counts as no later than any other: the undo errs on the safe side."""
    me = next((n for n in nodes if n.name == node), None)
    if me is None or not me.by_rdmaprov:
        return []
    members = _partitions(nodes)
    over = []
    for partition in me.partitions:
        earlier = [
            n
            for n in members[partition]
            if n.by_rdmaprov and (not n.reason_time or not me.reason_time or n.reason_time <= me.reason_time)
        ]
        allowed = limits.allowed(len(members[partition]))
        if len(earlier) > allowed:
            names = ", ".join(sorted(n.name for n in earlier))
            over.append(f"{partition}: {len(earlier)} drained by rdmaprov at once ({names}), at most {allowed}")
    return over
