"""cluster.slurm, typed: the Slurm cluster rdmaprov runs (mode full) or the site's that it adds its
node check to (mode health_check), its partitions and the check's drain etiquette.

And how long slurmd lets the check run, release by release. Before Slurm 26.05, slurmd kills the
HealthCheckProgram after a fixed 60 s. 26.05 made it `HealthCheckTimeout` (default 60 s), which
must stay below `HealthCheckInterval` (its daemons log `HealthCheckTimeout (60) must be less than
HealthCheckInterval (30)` at every start otherwise); older daemons refuse the key outright
(24.11: `Parsing error at unrecognized key`). 25.11 added `HealthCheckNodeState=START_ONLY`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rdmaprov.inventory.settings import Section
from rdmaprov.parsers.slurm_release import SlurmVersion

TIMEOUT_SINCE = SlurmVersion(26, 5)
START_ONLY_SINCE = SlurmVersion(25, 11)
# slurmd's kill before 26.05, and 26.05's default HealthCheckTimeout
FIXED_KILL_S = 60
# What node-check leaves of slurmd's limit: the interpreter's start before its clock begins, and
# its exit after the last scontrol call.
MARGIN_S = 5


@dataclass(frozen=True)
class HealthCheckTiming:
    """The health check's time limit as slurm.conf renders it and as slurmd enforces it."""

    timeout_s: int | None  # HealthCheckTimeout to render; None: the release has no such key
    kill_s: int  # when slurmd kills the program

    @property
    def budget_s(self) -> int:
        """The node check's own time: what it may spend before slurmd's kill."""
        return max(1, self.kill_s - MARGIN_S)

    @classmethod
    def running(cls, timeout_s: int | None) -> HealthCheckTiming:
        """The limit of a running Slurm from its `scontrol show config` (HealthCheckTimeout,
        absent before 26.05): what node-check keeps to on a site's own Slurm."""
        return cls(timeout_s, timeout_s) if timeout_s is not None else BEFORE_TIMEOUT


# Before 26.05 (and wherever the key is not set or not known): no key, slurmd's fixed 60 s.
BEFORE_TIMEOUT = HealthCheckTiming(None, FIXED_KILL_S)


@dataclass(frozen=True)
class SlurmPartition:
    name: str
    hosts: tuple[str, ...]  # inventory host names
    default: bool
    max_time: str


@dataclass(frozen=True)
class SlurmHealthCheck:
    """The node check as HealthCheckProgram, and its drain etiquette."""

    interval_s: int
    node_state: tuple[str, ...]
    cycle: bool
    drain: bool
    max_drain_fraction: float
    report_timeout_s: int
    timeout_s: int | None = None  # HealthCheckTimeout as declared (Slurm 26.05 and later)

    @property
    def node_state_value(self) -> str:
        """HealthCheckNodeState as slurm.conf takes it (ANY,CYCLE)."""
        return ",".join(self.node_state + (("CYCLE",) if self.cycle else ()))

    def timing(self, version: SlurmVersion | None) -> HealthCheckTiming:
        """The limit for a cluster running `version` (its oldest daemon; None: not known, so no
        key a release might refuse). From 26.05 the declared timeout is rendered, or, undeclared,
        Slurm's default kept below the interval (validate refuses a declared one that is not)."""
        if version is None or version < TIMEOUT_SINCE:
            return BEFORE_TIMEOUT
        timeout = self.timeout_s
        if timeout is None:
            timeout = max(1, min(FIXED_KILL_S, self.interval_s - 1))
        return HealthCheckTiming(timeout, timeout)

    def release_problem(self, version: SlurmVersion | None) -> str | None:
        """Why slurm.conf cannot be rendered for `version`, or None: before 25.11, START_ONLY is
        dropped with an error at every daemon's start (22.05.8: `Invalid HealthCheckNodeState value
        START_ONLY ignored`), and the nodes would be checked as they were before."""
        if "START_ONLY" in self.node_state and (version is None or version < START_ONLY_SINCE):
            have = f"the cluster runs Slurm {version}" if version else "the cluster's Slurm release is not known"
            return f"health_check.node_state START_ONLY needs Slurm {START_ONLY_SINCE.release} or later; {have}"
        return None


@dataclass(frozen=True)
class SlurmConfig:
    """cluster.slurm when enabled. `full`: rdmaprov runs the Slurm cluster; `health_check`: the site
    does, and rdmaprov installs only the node check."""

    mode: str  # full or health_check
    controller: str | None
    cluster_name: str
    partitions: tuple[SlurmPartition, ...]
    node_names: Mapping[str, str]
    health_check: SlurmHealthCheck
    mpi: str

    @classmethod
    def from_settings(cls, settings: Mapping[str, object], cluster: str, hosts: list[str]) -> SlurmConfig | None:
        """The typed view of cluster.slurm after fill_defaults (None when Slurm is off). Partition
        entries are list items, which fill_defaults does not reach: their schema defaults
        (default false, max_time INFINITE, hosts every host) are applied here."""
        slurm = Section.of(settings, ("cluster", "slurm"))
        if not slurm.flag("enabled"):
            return None
        check = slurm.section("health_check")
        name = slurm.optional_text("cluster_name") or re.sub(r"[^a-z0-9_-]", "-", cluster.lower())
        return cls(
            mode=slurm.text("mode"),
            controller=slurm.optional_text("controller"),
            cluster_name=name[:40],
            partitions=tuple(
                SlurmPartition(
                    p.text("name"),
                    p.texts("hosts") or tuple(hosts),
                    p.flag("default") if "default" in p else False,
                    p.optional_text("max_time") or "INFINITE",
                )
                for p in slurm.sections("partitions")
            ),
            node_names=MappingProxyType(slurm.text_map("node_names")),
            health_check=SlurmHealthCheck(
                check.integer("interval_s"),
                check.texts("node_state"),
                check.flag("cycle"),
                check.flag("drain"),
                check.number("max_drain_fraction"),
                check.integer("report_timeout_s"),
                check.optional_integer("timeout_s"),
            ),
            mpi=slurm.text("mpi"),
        )

    @property
    def manages(self) -> bool:
        """rdmaprov installs and configures Slurm itself (mode full)."""
        return self.mode == "full"

    def node_name(self, host: str) -> str:
        """The Slurm NodeName of an inventory host."""
        return self.node_names.get(host, host)

    def compute_hosts(self, hosts: list[str]) -> list[str]:
        """The inventory hosts that are Slurm nodes (in some partition), in inventory order; in
        health_check mode every host (the site's Slurm knows its own partitions)."""
        if not self.manages:
            return list(hosts)
        members = {h for p in self.partitions for h in p.hosts}
        return [h for h in hosts if h in members]

    def daemon_hosts(self, hosts: list[str]) -> list[str]:
        """The hosts that run this inventory's Slurm daemons: the controller, then the compute nodes."""
        return list(dict.fromkeys(([self.controller] if self.controller else []) + self.compute_hosts(hosts)))
