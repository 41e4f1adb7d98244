"""RDMA port counters, judged by how much they grew since the previous check: a counter's total
says nothing (a port up for a year has some), its growth over a known window does. The error
counters on every node; on a RoCE node whose QoS chain is declared, pause frames outside its
priority, and DCQCN's counters: silent where it is declared PFC-only, answering every ECN mark
where DCQCN is declared.

Each check keeps what it read on the control machine, one file per cluster; the first check of a
node records the baseline. A node that booted since (its kernel boot id changed) starts over:
ports come back from a reboot with new counters, and a link brought up at boot may count a
link_downed that is no fault. A counter lower than before means the port was reset otherwise
(a driver reload): that check also records a new baseline instead of judging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, TypeGuard

from rdmaprov.health.findings import Finding, finding
from rdmaprov.health.state import load_section, save_section
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.parsers.counters import CONGESTION_COUNTERS
from rdmaprov.paths import cluster_file


@dataclass(frozen=True)
class Limit:
    most: float  # the growth allowed: per window, per hour of the window, or its share of the window
    per_hour: bool = False
    share: bool = False  # a time in microseconds, `most` its largest share of the window (0.01: 1 %)
    least_us: float = 0.0  # a share's floor: a short window (Slurm's checks) is not judged on a burst
    # Growth allowed where this counter grew in the same window (an ECN mark answered by a CNP);
    # not judged where the port does not count it.
    unless: str = ""

    def allowed(self, window_s: float) -> float:
        if self.share:
            return max(self.least_us, self.most * window_s * 1e6)
        return self.most * max(window_s, 0.0) / 3600 if self.per_hour else self.most  # no rate for a clock gone back

    def exceeded(self, name: str, counters: Mapping[str, int], before: Mapping[str, int], window_s: float) -> bool:
        """Whether `name` grew past the limit between the two reads of a port."""
        if counters[name] - before[name] <= self.allowed(window_s):
            return False
        if not self.unless:
            return True
        if self.unless not in counters or self.unless not in before:
            return False
        return counters[self.unless] <= before[self.unless]

    def grew(self, name: str, growth: int, window_s: float) -> str:
        """The growth as a finding says it: a count, or a time with its share of the window."""
        if not self.share:
            return f"{name} +{growth}" + (f" with no {self.unless}" if self.unless else "")
        share = f" ({growth / 1e4 / window_s:.1f} % of the time)" if window_s > 0 else ""  # a clock gone back
        return f"{name} +{growth / 1e6:.1f} s{share}"

    def __str__(self) -> str:
        if self.share:
            return f"≤ {self.most * 100:g} % of the time (at least {self.least_us / 1e6:g} s)"
        unless = f" unless {self.unless} grew" if self.unless else ""
        return (f"≤ {self.most:g}/h" if self.per_hour else f"+{self.most:g}") + unless


# One per parsers.counters.ERROR_COUNTERS. Defaults from the field: a link that went down,
# retrained, overran its buffers or lost integrity is a finding at once; bit errors and drops are
# judged by their rate.
LIMITS = {
    "link_downed": Limit(0),
    "link_error_recovery": Limit(0),
    "excessive_buffer_overrun_errors": Limit(0),
    "local_link_integrity_errors": Limit(0),
    "symbol_error": Limit(120, per_hour=True),
    "port_rcv_errors": Limit(120, per_hour=True),
    "port_xmit_discards": Limit(120, per_hour=True),
}


@dataclass(frozen=True)
class CounterCheck:
    """Counters judged together, one finding per port: their limits and what to do past them."""

    check_id: str
    limits: Mapping[str, Limit]
    hint: str


PORT_ERRORS = CounterCheck(
    "rdma.port_errors",
    LIMITS,
    "a link that flaps or corrupts: check the cable and transceiver (`mlxlink`), the switch port, then swap",
)
# Under roce_qos pfc_only no RoCE packet is ECN-capable (its ToS has no ECT bit) and no NIC runs
# DCQCN: a CE-marked packet or a CNP means a node sends in another class or runs DCQCN, against
# the fabric's declared chain. A CNP arriving where the reaction point is off (as pfc_only sets
# it) is counted as ignored, not handled.
NO_DCQCN = CounterCheck(
    "roce.ecn_activity",
    {name: Limit(0) for name in CONGESTION_COUNTERS},
    "the fabric is declared PFC-only, yet ECN marks or CNPs arrive: a node with another roce_qos (or set by "
    "hand) sends ECN-capable traffic or runs DCQCN; `rdmaprov verify` names the node whose chain differs",
)


def dcqcn(priority: int) -> CounterCheck:
    """Under the dcqcn profile a CE-marked RoCE packet must be answered: its receiver's notification
    point sends a CNP (fewer than the marks: one per flow per interval, but some), and the sender's
    reaction point slows down on it. Marks with no CNP in the window mean the notification point
    is off for the priority; a CNP the reaction point ignored (mlx5 `rp_cnp_ignored`) means its
    reaction point is. Either way congestion is no longer controlled and PFC pauses instead."""
    return CounterCheck(
        "roce.dcqcn",
        {"np_ecn_marked_roce_packets": Limit(0, unless="np_cnp_sent"), "rp_cnp_ignored": Limit(0)},
        f"DCQCN is declared on priority {priority}: marks with no CNP mean the notification point is off "
        f"(ecn/roce_np/enable/{priority}), ignored CNPs that the reaction point is (ecn/roce_rp/enable/{priority}); "
        "`rdmaprov apply --tags roce_qos` sets both again",
    )


def stray_pause(priority: int) -> CounterCheck:
    """PFC is on for the RoCE `priority` alone, so pausing there is the lossless fabric working;
    a pause frame on any other priority, or a link-level (802.3x) pause that stops the whole port,
    means a switch port or a NIC runs another flow-control setting than the declared chain; and a
    pause storm (mlx5 stopped a port that paused too long) is the lossless priority gone wrong.
    Counters from `ethtool -S` (parsers/roce_qos.pause_counters: mlx5, bnxt_en, ice)."""
    others = [p for p in range(8) if p != priority]
    limits = {f"{way}_pfc_prio{p}": Limit(0) for way in ("rx", "tx") for p in others}
    limits |= {f"{way}_link_pause": Limit(0) for way in ("rx", "tx")}
    limits |= {f"pause_storm_{level}": Limit(0) for level in ("warning", "error")}
    return CounterCheck(
        "roce.pause",
        limits,
        f"PFC is declared on priority {priority} alone: check the switch port's PFC priorities and that "
        "link-level flow control is off (`ethtool -A NETDEV rx off tx off`; `ethtool -a` shows it)",
    )


# How much of the time between two checks a node may hold its switch paused on the RoCE
# priority, and the pause always allowed however close the checks (Slurm's run every few minutes).
PAUSED_SHARE = 0.01
PAUSED_FLOOR_US = 1_000_000


def pause_time(priority: int) -> CounterCheck:
    """Pausing on the RoCE priority is the lossless fabric working, but a node that holds its
    switch port paused (tx) for more than PAUSED_SHARE of the time cannot take in what arrives:
    the node itself is slow. A share of the wall time between checks, idle hours included, so
    under load the traffic spent a larger share paused. The time the switch held this node (rx)
    is not judged: it names the victim of congestion elsewhere, not its cause. Counted by mlx5
    and bnxt_en (parsers/roce_qos.pause_counters); a NIC that counts no time is not judged."""
    limits = {f"tx_pfc_prio{priority}_pause_us": Limit(PAUSED_SHARE, share=True, least_us=PAUSED_FLOOR_US)}
    return CounterCheck(
        "roce.pause_time",
        limits,
        "this node paused its switch port: it cannot take in what arrives at line rate; check its PCIe link "
        "(width and speed), the HCA's NUMA node and what else the host runs",
    )


def counter_checks(node: NodeConfig) -> tuple[CounterCheck, ...]:
    """What a node's counters are judged on: the error counters; where the hosts set RoCE's PFC,
    pause outside the RoCE priority and the time spent paused on it; and DCQCN's, answering
    congestion where it is declared, silent where it must be off."""
    qos = node.qos
    if qos is None or qos.dcb_scope(node.fabric) is not None:
        return (PORT_ERRORS,)
    pfc = (stray_pause(qos.priority), pause_time(qos.priority))
    return (PORT_ERRORS, *pfc, dcqcn(qos.priority) if qos.ecn else NO_DCQCN)


def window_checks(node: NodeConfig) -> tuple[CounterCheck, ...]:
    """counter_checks for a window of seconds around one test (the incast gate) rather than the
    minutes or hours between periodic checks: limits per hour are left out (one error in five
    seconds is no rate; the periodic checks judge rates), and a share of the window has no
    floor (the floor keeps a burst between close Slurm checks from failing; here the window is
    the traffic itself)."""
    kept = []
    for check in counter_checks(node):
        limits = {name: replace(limit, least_us=0.0) for name, limit in check.limits.items() if not limit.per_hour}
        kept.append(replace(check, limits=limits))
    return tuple(kept)


def state_file(cluster: str) -> Path:
    """Where a cluster's last counter reads are kept on the control machine (XDG state)."""
    return cluster_file(cluster, "counters.json")


class _Read(TypedDict):
    """The keys every kept read has; CounterRead adds the one it may lack (NotRequired is Python 3.11's)."""

    at: float  # epoch seconds
    ports: dict[str, dict[str, int]]  # {port: {counter: value}}


class CounterRead(_Read, total=False):
    """A node's counters as a check keeps them for the next one (save_reads, verify): when, on
    which boot, per port."""

    boot: str | None  # the kernel's boot id; reads kept before there was one are judged across reboots


def sound_read(read: object) -> TypeGuard[CounterRead]:
    """A read as a check keeps it (CounterRead): a hand-edited or damaged one is not judged
    against, the check records a new baseline instead."""
    if not isinstance(read, dict):
        return False
    ports = read.get("ports")
    return (
        isinstance(read.get("at"), (int, float))
        and (read.get("boot") is None or isinstance(read["boot"], str))
        and isinstance(ports, dict)
        and all(isinstance(c, dict) and all(isinstance(v, int) for v in c.values()) for c in ports.values())
    )


def load_reads(path: Path) -> dict[str, CounterRead]:
    """{host: its last read}, sound reads only; nothing yet or unreadable: {}."""
    return {host: read for host, read in load_section(path, "hosts").items() if sound_read(read)}


def save_reads(path: Path, hosts: dict[str, CounterRead]) -> None:
    """Write atomically: a check interrupted mid-write must not cost every node its baseline."""
    save_section(path, "hosts", hosts)


def _duration(seconds: float) -> str:
    """A window as a finding says it: hours, minutes, or seconds (the incast gate's few)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def counter_findings(
    host: str,
    fabric: str | None,
    now: float,
    ports: dict[str, dict[str, int]],
    previous: CounterRead | None,
    boot: str = "",
    checks: Sequence[CounterCheck] = (PORT_ERRORS,),
) -> list[Finding]:
    """One finding per port and check: which of its counters grew past their limit since
    `previous`, the read kept from the last check (taken on the boot `previous["boot"]`; `boot` is
    this one)."""
    rebooted = bool(previous and boot and previous.get("boot") and previous["boot"] != boot)
    window = now - previous["at"] if previous else 0.0
    findings = []
    for check in checks:
        for port, counters in sorted(ports.items()):
            limited = {name: check.limits[name] for name in counters if name in check.limits}
            if not limited:
                continue
            before = previous["ports"].get(port) if previous else None
            ok, found = _judged(limited, counters, before, rebooted, window)
            expected = ", ".join(f"{name} {limit}" for name, limit in limited.items())
            findings.append(finding(host, fabric, check.check_id, port, ok, expected, found, check.hint))
    return findings


def _judged(
    limited: dict[str, Limit], counters: dict[str, int], before: dict[str, int] | None, rebooted: bool, window: float
) -> tuple[bool, str]:
    """Whether a port's limited counters stayed within their limits, and what was found."""
    if before is None:
        return True, "baseline recorded: judged from the next check on"
    if rebooted:
        return True, "the node rebooted since the last check: new baseline"
    watched = [*limited, *(limit.unless for limit in limited.values() if limit.unless in counters)]
    if any(counters[name] < before.get(name, 0) for name in watched):
        return True, "counters reset since the last check: new baseline"
    grew = [
        limit.grew(name, counters[name] - before[name], window)
        for name, limit in limited.items()
        if name in before and limit.exceeded(name, counters, before, window)
    ]
    if grew:
        return False, "; ".join(grew) + f" in {_duration(window)}"
    return True, f"none grew past its limit in {_duration(window)}"
