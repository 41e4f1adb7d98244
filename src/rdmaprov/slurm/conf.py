"""slurm.conf, gres.conf and cgroup.conf as rdmaprov renders them from the inventory and the
nodes' hardware: the same bytes on every host (Slurm warns when they differ), every value passed
through `slurm_word` (validated by the schema first; refused here if it could still break a line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rdmaprov.inventory.slurm import SlurmConfig
from rdmaprov.parsers.slurm import NodeHardware
from rdmaprov.parsers.slurm_release import SlurmVersion
from rdmaprov.quoting import slurm_word

HEADER = "# Managed by rdmaprov (slurm deploy) from the inventory: local edits are overwritten.\n"
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/rdmaprov-slurm-health-check"
SLURM_CONF = "/etc/slurm/slurm.conf"
GRES_CONF = "/etc/slurm/gres.conf"
CGROUP_CONF = "/etc/slurm/cgroup.conf"
SLURMD_DEFAULTS = "/etc/default/slurmd"

# cgroup v2 (Debian 12's default hierarchy): tasks held to their cores and their GPUs' devices.
CGROUP = "CgroupPlugin=autodetect\nConstrainCores=yes\nConstrainDevices=yes\n"


@dataclass(frozen=True)
class SlurmNodeLine:
    """One compute node in slurm.conf: from this run's facts, or kept as the file had it."""

    name: str  # Slurm NodeName
    address: str
    hardware: NodeHardware | None
    gpus: int
    kept: str | None = None  # the existing line, for a node this run did not reach

    def line(self) -> str:
        if self.hardware is None:
            if self.kept is None:
                raise ValueError(f"node {self.name}: neither its hardware nor an existing line is known")
            return self.kept
        words = [f"NodeName={slurm_word(self.name, 'node name')}", f"NodeAddr={slurm_word(self.address, 'address')}"]
        words += self.hardware.slurm_words()
        if self.gpus:
            words.append(f"Gres=gpu:{int(self.gpus)}")
        return " ".join(words + ["State=UNKNOWN"])


def render_slurm_conf(
    slurm: SlurmConfig,
    controller: tuple[str, str],  # (its hostname, as slurmctld checks it; its address)
    nodes: Sequence[SlurmNodeLine],
    partitions: Sequence[tuple[str, list[str], bool, str]],  # (name, Slurm node names, default, max_time)
    *,
    version: SlurmVersion | None,  # the cluster's oldest Slurm: no key it would refuse
) -> str:
    """The file for a cluster running `version`; ValueError when the inventory asks for what that
    release does not have (the daemons would stop at the parse)."""
    check = slurm.health_check
    problem = check.release_problem(version)
    if problem:
        raise ValueError(problem)
    timeout = check.timing(version).timeout_s
    hostname, address = controller
    lines = [
        HEADER.rstrip("\n"),
        f"ClusterName={slurm_word(slurm.cluster_name, 'cluster name')}",
        f"SlurmctldHost={slurm_word(hostname, 'controller hostname')}({slurm_word(address, 'controller address')})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        # Slurm gives a job the submitting shell's limits; a login with the kernel's default memlock (8 MiB)
        # would hold every RDMA job to it. Jobs keep slurmd's (unlimited: the limits deploy).
        "PropagateResourceLimitsExcept=MEMLOCK",
        # A node that was down comes back by itself once slurmd registers; a drain stays (rdmaprov's or an admin's).
        "ReturnToService=2",
        f"HealthCheckProgram={HEALTH_CHECK_PROGRAM}",
        f"HealthCheckInterval={int(check.interval_s)}",
        f"HealthCheckNodeState={','.join(slurm_word(s, 'node state') for s in check.node_state_value.split(','))}",
    ]
    if timeout is not None:
        lines.append(f"HealthCheckTimeout={int(timeout)}")
    if any(n.gpus for n in nodes) or any("Gres=gpu" in (n.kept or "") for n in nodes):
        lines.append("GresTypes=gpu")
    lines += [n.line() for n in nodes]
    for name, members, default, max_time in partitions:
        words = [f"PartitionName={slurm_word(name, 'partition name')}"]
        words.append(f"Nodes={','.join(slurm_word(m, 'node name') for m in members)}")
        words += [f"Default={'YES' if default else 'NO'}", f"MaxTime={slurm_word(max_time, 'max_time')}", "State=UP"]
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def render_gres_conf(nodes: Sequence[tuple[str, int]]) -> str | None:
    """`NodeName=… Name=gpu File=/dev/nvidia[0-N]` for each GPU node; None when no node has GPUs."""
    lines = [
        f"NodeName={slurm_word(name, 'node name')} Name=gpu File=/dev/nvidia[0-{int(gpus) - 1}]"
        if gpus > 1
        else f"NodeName={slurm_word(name, 'node name')} Name=gpu File=/dev/nvidia0"
        for name, gpus in nodes
        if gpus
    ]
    return HEADER + "\n".join(lines) + "\n" if lines else None


def render_slurmd_defaults(name: str) -> str:
    """/etc/default/slurmd (Debian's unit reads SLURMD_OPTIONS): slurmd is the inventory's node
    name whatever the hostname."""
    return HEADER + f'SLURMD_OPTIONS="-N {slurm_word(name, "node name")}"\n'
