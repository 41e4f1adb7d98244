"""RDMA port error counters, judged by how much they grew since the previous check: a counter's
total says nothing (a port up for a year has some), its growth over a known window does.

Each check keeps what it read on the control machine, one file per cluster; the first check of a
node records the baseline. A node that booted since (its kernel boot id changed) starts over:
ports come back from a reboot with new counters, and a link brought up at boot may count a
link_downed that is no fault. A counter lower than before means the port was reset otherwise
(a driver reload): that check also records a new baseline instead of judging.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdmaprov.health.findings import Finding, finding
from rdmaprov.health.state import load_section, save_section
from rdmaprov.paths import cluster_file


@dataclass(frozen=True)
class Limit:
    most: float  # the growth allowed: per window, or per hour of the window
    per_hour: bool = False

    def allowed(self, window_s: float) -> float:
        return self.most * window_s / 3600 if self.per_hour else self.most

    def __str__(self) -> str:
        return f"≤ {self.most:g}/h" if self.per_hour else f"+{self.most:g}"


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


def state_file(cluster: str) -> Path:
    """Where a cluster's last counter reads are kept on the control machine (XDG state)."""
    return cluster_file(cluster, "counters.json")


def load_reads(path: Path) -> dict[str, Any]:
    """{host: {"at": epoch seconds, "ports": {port: {counter: value}}}}; nothing yet or unreadable: {}."""
    return load_section(path, "hosts")


def save_reads(path: Path, hosts: dict[str, Any]) -> None:
    """Write atomically: a check interrupted mid-write must not cost every node its baseline."""
    save_section(path, "hosts", hosts)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def counter_findings(
    host: str,
    fabric: str | None,
    now: float,
    ports: dict[str, dict[str, int]],
    previous: dict[str, Any] | None,
    boot: str = "",
) -> list[Finding]:
    """One finding per port: which error counters grew past their limit since `previous`, the
    read kept from the last check (taken on the boot `previous["boot"]`; `boot` is this one)."""

    def port_finding(port: str, ok: bool, expected: str, found: str) -> Finding:
        hint = "a link that flaps or corrupts: check the cable and transceiver (`mlxlink`), the switch port, then swap"
        return finding(host, fabric, "rdma.port_errors", port, ok, expected, found, hint)

    findings = []
    rebooted = bool(previous and boot and previous.get("boot") and previous["boot"] != boot)
    window = now - previous["at"] if previous else 0.0
    for port, counters in sorted(ports.items()):
        limited = {name: LIMITS[name] for name in counters if name in LIMITS}
        if not limited:
            continue
        expected = ", ".join(f"{name} {limit}" for name, limit in limited.items())
        before = (previous or {}).get("ports", {}).get(port)
        if before is None:
            findings.append(port_finding(port, True, expected, "baseline recorded: judged from the next check on"))
            continue
        if rebooted:
            findings.append(port_finding(port, True, expected, "the node rebooted since the last check: new baseline"))
            continue
        if any(counters[name] < before.get(name, 0) for name in limited):
            findings.append(port_finding(port, True, expected, "counters reset since the last check: new baseline"))
            continue
        grew = [
            f"{name} +{counters[name] - before[name]}"
            for name, limit in limited.items()
            if name in before and counters[name] - before[name] > limit.allowed(window)
        ]
        found = (
            "; ".join(grew) + f" in {_duration(window)}" if grew else f"none grew past its limit in {_duration(window)}"
        )
        findings.append(port_finding(port, not grew, expected, found))
    return findings
