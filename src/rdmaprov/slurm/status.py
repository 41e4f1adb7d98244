"""The fleet as the nodes' own checks left it in Slurm: which nodes are in service, which rdmaprov's
node check drained (and why, since when), which an admin drained, which stopped answering.

This is `rdmaprov status`'s view. It needs no connection to the nodes: each node's health check
(Slurm's HealthCheckProgram) already judged it and wrote its verdict into Slurm as a drain
reason, so one `scontrol -o show node` on one Slurm host shows the whole fleet — at 10,000 nodes
one SSH session, not 10,000.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime

from rdmaprov.parsers.slurm import SlurmNode

# Each status, and whether a node in it keeps the fleet from being ready (exit 4).
STATUSES: dict[str, bool] = {
    "healthy": False,
    "drained by rdmaprov": True,  # its own check failed
    "not reporting": True,  # slurmd does not answer, never registered, or is not started yet: no check runs
    "down": True,  # Slurm took it out of service (an unexpected reboot, a failed launch): reason says why
    "not in Slurm": True,  # an inventory host Slurm does not know
    "drained by an admin": False,  # someone's decision (a drain, or FAIL), shown but not rdmaprov's verdict
    "powered down": False,  # Slurm's power saving: powered off by design
    "rebooting": False,  # a reboot Slurm asked for
}
_SILENT = frozenset({"NOT_RESPONDING", "UNKNOWN", "FUTURE", "INVALID_REG", "INVAL"})
_ADMIN = frozenset({"FAIL", "FAILING"})
_POWER = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP"})
_REBOOT = frozenset({"REBOOT_ISSUED", "REBOOT_REQUESTED"})
# Slurm prints the base state first (IDLE+DRAIN, not DRAIN+IDLE); the flags follow.
_BASE = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})


@dataclass(frozen=True)
class NodeStatus:
    """One inventory host as Slurm shows it."""

    host: str
    slurm_name: str
    status: str  # a key of STATUSES
    state: str  # Slurm's state words as it prints them (IDLE+DRAIN), "" when Slurm lacks the node
    reason: str  # the drain or down reason, without Slurm's [user@time] stamp
    since: str  # when that reason was set (ISO, Slurm's time), "" when none

    @property
    def failing(self) -> bool:
        return STATUSES[self.status]

    def age(self, now: datetime) -> str:
        """How long ago the reason was set, as a person reads it (12 min, 3 h 5 min, 2 d 4 h)."""
        if not self.since:
            return ""
        try:
            # clocks apart by a little (Slurm stamps with the controller's) read as "0 min", never negative
            seconds = max(0, int((now - datetime.fromisoformat(self.since)).total_seconds()))
        except ValueError:
            return ""
        minutes, hours, days = seconds // 60 % 60, seconds // 3600 % 24, seconds // 86400
        if days:
            return f"{days} d {hours} h"
        return f"{hours} h {minutes} min" if hours else f"{minutes} min"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "failing": self.failing}


def classify(node: SlurmNode) -> str:
    """The status of a node Slurm knows. Silence outranks a drain: a node that no longer answers
    runs no check, so its drain reason (rdmaprov's or not) is old news."""
    if node.states & _SILENT:
        return "not reporting"
    if node.states & _REBOOT:
        return "rebooting"
    if node.states & _POWER:
        return "powered down"
    if node.drained and node.by_rdmaprov:
        return "drained by rdmaprov"
    if node.drained or node.states & _ADMIN:
        return "drained by an admin"
    return "down" if "DOWN" in node.states else "healthy"


def _standing_reason(node: SlurmNode) -> tuple[str, str]:
    """The reason and its time while the node is out of service or on its way there (a reboot
    or power-down asked with a reason). Slurm 24.11 keeps a drain's reason after `state=resume`
    (IDLE, Reason=… as before): on a node back in service it is history, and shown it would
    read as a live fault."""
    if node.drained or node.states & (_ADMIN | _REBOOT | _POWER | {"DOWN"}):
        return node.reason, node.reason_time
    return "", ""


def fleet(hosts: list[str], slurm_names: Mapping[str, str], nodes: list[SlurmNode]) -> list[NodeStatus]:
    """Each of `hosts` (inventory order) with its Slurm node, by its Slurm name."""
    by_name = {n.name: n for n in nodes}
    found = []
    for host in hosts:
        name = slurm_names.get(host, host)
        node = by_name.get(name)
        if node is None:
            found.append(NodeStatus(host, name, "not in Slurm", "", "", ""))
            continue
        state = "+".join(sorted(node.states, key=lambda s: (s not in _BASE, s)))
        reason, since = _standing_reason(node)
        found.append(NodeStatus(host, name, classify(node), state, reason, since))
    return found


def counts(statuses: list[NodeStatus]) -> dict[str, int]:
    """How many nodes are in each status, every status named (0 included), in STATUSES' order."""
    found = Counter(s.status for s in statuses)
    return {status: found[status] for status in STATUSES}


EXIT_READY, EXIT_FAILING = 0, 4


@dataclass
class FleetStatus:
    """`rdmaprov status`'s answer: the selected hosts' statuses, or why Slurm could not be read."""

    cluster: str
    source: str  # the host whose scontrol answered, "" when none did
    read_at: str  # the source's clock when it answered (ISO; "" when its answer had none)
    nodes: list[NodeStatus] = field(default_factory=list)
    # why the fleet could not be read: the hosts tried, with what each said
    unread: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def exit_code(self) -> int:
        failing = not self.source or any(n.failing for n in self.nodes)
        return EXIT_FAILING if failing else EXIT_READY

    def now(self) -> datetime:
        return datetime.fromisoformat(self.read_at) if self.read_at else datetime.now()

    def to_json(self) -> dict[str, object]:
        now = self.now()
        return {
            "command": "status",
            "cluster": self.cluster,
            "source": self.source,
            "read_at": self.read_at,
            "exit_code": self.exit_code,
            "counts": counts(self.nodes),
            "nodes": [{**n.to_json(), "age": n.age(now)} for n in self.nodes],
            "unread": self.unread,
            "duration_s": round(self.duration_s, 3),
        }
