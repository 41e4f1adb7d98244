"""Typed results of a run, per host and per operation, and the exit code they imply.

The JSON form of these objects is a public interface (schemas/result.schema.json): add fields,
never rename or remove them without bumping SCHEMA_VERSION.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

OpStatus = Literal["changed", "unchanged", "would_change", "failed", "skipped"]
HostStatus = Literal["changed", "unchanged", "failed", "unreachable", "skipped", "interrupted"]

EXIT_OK = 0
EXIT_CHANGES = 2
EXIT_FAILURES = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it: Ctrl-C stopped the run


@dataclass
class OpResult:
    """One operation on one host."""

    name: str
    status: OpStatus
    commands: list[str] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    diff: str | None = None
    deploy: str | None = None
    # check only, for a would-be change: corrective (the node moved away from what was applied),
    # intentional (the inventory changed since) or new (never applied here).
    drift: str | None = None


@dataclass
class HostResult:
    """Everything that happened on one host."""

    name: str
    address: str
    status: HostStatus = "unchanged"
    error: str | None = None
    ops: list[OpResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reboot_required: list[str] = field(default_factory=list)
    last_applied: str | None = None  # from the node's applied-state record
    batch: int = 1  # which --serial batch applied this host (1 without --serial)
    round_trips: int = 0  # commands and file transfers over this host's connection (connecting not counted)
    # check only: deploys whose inventory settings differ from what was last applied here.
    inputs_changed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        """Operations that changed (or would change) the host, plus a reboot still owed."""
        return sum(op.status in ("changed", "would_change") for op in self.ops) + bool(self.reboot_required)

    @property
    def failed(self) -> int:
        return sum(op.status == "failed" for op in self.ops)

    def settle(self) -> None:
        """Derive the host status from its operations (unreachable/failed set by the engine win)."""
        if self.status in ("failed", "unreachable", "skipped", "interrupted"):
            return
        if self.failed:
            self.status = "failed"
        elif self.changed:
            self.status = "changed"


@dataclass
class RunResult:
    """A whole run: the command, the inventory, and every host's result."""

    command: str
    inventory: str
    cluster: str
    started_at: str
    duration_s: float = 0.0
    hosts: list[HostResult] = field(default_factory=list)
    verify: list[Any] | None = None  # HostVerification after apply, or for `verify`
    gates: list[Any] | None = None  # GateResult
    diagnosis: Any | None = None  # health.diagnose.Diagnosis, after a failed cluster gate
    interrupted: bool = False  # Ctrl-C stopped the run: hosts say where (status "interrupted")
    # Hosts the gates were asked for but left out, with why (a failed apply or verify, too few
    # hosts left): a gate missing from the report is never silent.
    gates_not_run: dict[str, str] = field(default_factory=dict)

    @property
    def health_failed(self) -> bool:
        """A verification check or a gate failed (or a host could not be verified)."""
        return any(v.status != "ok" for v in self.verify or []) or any(not g.passed for g in self.gates or [])

    @property
    def exit_code(self) -> int:
        """Puppet-style: 0 nothing to do, 2 changes (made or pending), 4 failures, 6 both; 130
        when interrupted, whatever was done before."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        code = EXIT_OK
        if any(h.changed for h in self.hosts):
            code |= EXIT_CHANGES
        if any(h.status in ("failed", "unreachable", "skipped") for h in self.hosts) or self.health_failed:
            code |= EXIT_FAILURES
        return code

    def summary(self) -> dict[str, int]:
        counts = {"hosts": len(self.hosts), "changed": 0, "unchanged": 0, "failed": 0, "unreachable": 0}
        for host in self.hosts:
            counts[host.status] = counts.get(host.status, 0) + 1
        return counts

    def to_json(self) -> dict[str, object]:
        from rdmaprov import __version__

        hosts = []
        for host in self.hosts:
            item = asdict(host)
            item["changed"] = host.changed
            item["failed"] = host.failed
            hosts.append(item)
        extra: dict[str, object] = {}
        if self.verify is not None:
            extra["verify"] = [v.to_json() for v in self.verify]
        if self.gates is not None:
            extra["gates"] = [g.to_json() for g in self.gates]
        if self.diagnosis is not None:
            extra["diagnosis"] = self.diagnosis.to_json()
        if self.gates_not_run:
            extra["gates_not_run"] = dict(self.gates_not_run)
        return {
            "schema_version": SCHEMA_VERSION,
            "rdmaprov_version": __version__,
            "command": self.command,
            "inventory": self.inventory,
            "cluster": self.cluster,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "exit_code": self.exit_code,
            "interrupted": self.interrupted,
            "summary": self.summary(),
            "hosts": hosts,
            **extra,
        }
