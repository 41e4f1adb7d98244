"""cluster.slurm, typed: the Slurm cluster rdmaprov runs (mode full) or the site's that it adds its
node check to (mode health_check), its partitions and the check's drain etiquette."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rdmaprov.inventory.config import strings


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

    @property
    def node_state_value(self) -> str:
        """HealthCheckNodeState as slurm.conf takes it (ANY,CYCLE)."""
        return ",".join(self.node_state + (("CYCLE",) if self.cycle else ()))


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
    def from_settings(cls, slurm: dict[str, Any], cluster: str, hosts: list[str]) -> SlurmConfig | None:
        """The typed view of cluster.slurm after fill_defaults (None when Slurm is off). Partition
        entries are list items, which fill_defaults does not reach: their schema defaults
        (default false, max_time INFINITE, hosts every host) are applied here."""
        if not slurm["enabled"]:
            return None
        check = slurm["health_check"]
        name = slurm.get("cluster_name") or re.sub(r"[^a-z0-9_-]", "-", cluster.lower())
        return cls(
            mode=slurm["mode"],
            controller=slurm.get("controller"),
            cluster_name=name[:40],
            partitions=tuple(
                SlurmPartition(
                    p["name"],
                    strings(p.get("hosts")) or tuple(hosts),
                    p.get("default", False),
                    p.get("max_time", "INFINITE"),
                )
                for p in slurm["partitions"]
            ),
            node_names=MappingProxyType(dict(slurm.get("node_names") or {})),
            health_check=SlurmHealthCheck(
                check["interval_s"],
                strings(check["node_state"]),
                check["cycle"],
                check["drain"],
                check["max_drain_fraction"],
                check["report_timeout_s"],
            ),
            mpi=slurm["mpi"],
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
