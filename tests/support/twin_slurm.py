"""Slurm on the twin hosts, as a site that runs its own Slurm has it: Debian 12's slurmctld 22.05 on
the first host, slurmd and munged on every host, one partition of them all.

The daemons are this machine's packages, started in each host's own namespaces over SSH (its
/run, /var and /etc are private to it). What the twin cannot give them is kept small: no cgroup
plugin is used (process tracking by /proc, no task plugin), so the cgroup directory slurmd looks
for is an empty one in the twin's own /sys, and slurmd takes its CPU count from slurm.conf (the
twin's /sys has no CPU topology). Every daemon is stopped by its own PID file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.support.slurm_fleet import SINFO, sinfo_states
from tests.support.sshhosts import SSHHost, SSHHostFarm

# What each host runs, and where the daemon's PID is kept.
PID_FILES = ("/run/slurmd.pid", "/run/slurmctld.pid", "/run/munge/munged.pid")

_PREPARE = """set -e
mkdir -p /etc/slurm /var/spool/slurmd /var/spool/slurmctld /var/log /run/munge /sys/fs/cgroup/freezer
chown munge:munge /run/munge
cat > /etc/slurm/slurm.conf <<'CONF'
{conf}CONF
printf 'CgroupPlugin=cgroup/v1\\nCgroupMountpoint=/sys/fs/cgroup\\n' > /etc/slurm/cgroup.conf
runuser -u munge -- munged --pid-file=/run/munge/munged.pid
"""


@dataclass
class TwinSlurm:
    farm: SSHHostFarm
    partition: str = "gpu"

    @property
    def controller(self) -> SSHHost:
        return self.farm.hosts[0]

    def conf(self) -> str:
        head = self.controller
        nodes = "".join(f"NodeName={h.name} NodeAddr={h.address} CPUs=1 State=UNKNOWN\n" for h in self.farm.hosts)
        return (
            f"ClusterName=twin\nSlurmctldHost={head.name}({head.address})\nSlurmUser=root\nAuthType=auth/munge\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "SlurmdParameters=config_overrides\nReturnToService=2\nMpiDefault=none\n"
            "StateSaveLocation=/var/spool/slurmctld\nSlurmdSpoolDir=/var/spool/slurmd\n"
            "SlurmctldPidFile=/run/slurmctld.pid\nSlurmdPidFile=/run/slurmd.pid\n"
            "SlurmctldLogFile=/var/log/slurmctld.log\nSlurmdLogFile=/var/log/slurmd.log\n"
            f"{nodes}PartitionName={self.partition} Nodes=ALL Default=YES State=UP\n"
        )

    def start(self) -> TwinSlurm:
        """Every daemon up and every node idle in Slurm; on a failure, what started is stopped."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> TwinSlurm:
        for host in self.farm.hosts:
            self._run(host, _PREPARE.format(conf=self.conf()))
        self._run(self.controller, "slurmctld")
        for host in self.farm.hosts:
            self._run(host, "slurmd")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = self.states()
            if len(states) == len(self.farm.hosts) and all(s == ("idle", "none") for s in states.values()):
                return self
            time.sleep(1)
        raise RuntimeError(f"the twin's Slurm nodes did not come up idle: {self.states()}")

    def _run(self, host: SSHHost, command: str) -> None:
        done = self.farm.ssh(host, command)
        if done.returncode != 0:
            raise RuntimeError(f"{host.name}: {command.splitlines()[0]} failed: {done.stdout}{done.stderr}")

    def states(self) -> dict[str, tuple[str, str]]:
        """{node: (state, reason)} as sinfo on the controller shows them."""
        return sinfo_states(self.farm.ssh(self.controller, SINFO).stdout)

    def stop(self) -> None:
        """Each daemon this started, by its PID file, on every host still answering."""
        kill = "; ".join(f'[ -f {f} ] && kill "$(cat {f})"' for f in PID_FILES)
        for host in self.farm.hosts:
            self.farm.ssh(host, f"{kill}; true")
