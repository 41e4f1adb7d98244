"""How a gate's workload reaches the nodes: over SSH (the command on the node itself; across nodes,
mpirun with a hostfile, its own traffic on TCP) or as Slurm jobs (srun from the node, exclusive
use of the nodes, MPI wired up by Slurm's PMI). The gates build the same workload either way and
judge the same output: the launcher is the only thing that differs (`cluster.gates.via`,
`--gates-via`).

Under Slurm, nodes busy with other jobs are not tested under them: srun waits at most IMMEDIATE_S
for the nodes (`--immediate`), then the gate fails with Slurm's reason (busy, drained, down). That
wait comes on top of the workload's own deadline. Each launcher names its jobs with a token of its
own, so that stopping what it left waiting never touches another run's gates.
"""

from __future__ import annotations

import math
import secrets
import shlex
from dataclasses import dataclass

from rdmaprov.engine.session import CommandResult, Session
from rdmaprov.health.gates.mpi import mpirun_path
from rdmaprov.inventory.gates import AllReduceGate
from rdmaprov.quoting import sh, sh_join

HOSTFILE = "/tmp/rdmaprov-allreduce-hosts"
# How long srun waits for its nodes before the gate gives up on them.
IMMEDIATE_S = 60


@dataclass(frozen=True)
class Job:
    """An MPI workload across nodes: `per_node` ranks on each host, this environment, this program."""

    hosts: list[str]
    per_node: int
    env: dict[str, str]
    program: list[str]
    gpus_per_node: int = 0
    name: str = "all_reduce"  # the gate, as a Slurm job's name says it

    @property
    def ranks(self) -> int:
        return self.per_node * len(self.hosts)


class Launcher:
    """Runs a gate's workloads on the nodes of `session` (SSH: the node's own shell)."""

    via = "ssh"
    start_s = 0  # how much longer than a plain command a workload may take to start

    def __init__(self, session: Session) -> None:
        self.session = session

    def stop(self, host: str) -> None:
        """Stop what this launcher left waiting on `host` (a command over SSH leaves nothing)."""

    def run(self, host: str, command: str, timeout_s: int, gpus: int = 0) -> CommandResult:
        """`command` (a shell command) on `host`; `gpus`: the GPUs it uses (Slurm allocates them)."""
        return self.session.run(host, command, timeout_s)

    def job_command(self, job: Job, settings: AllReduceGate, timeout_s: int) -> str:
        """mpirun across the hosts from the first, with a hostfile; its own traffic over TCP
        (`pml ob1`, `btl tcp,self`): UCX over some RDMA devices aborts (irdma without SRQ, rxe)."""
        inventory = self.session.inventory
        first = inventory.hosts[job.hosts[0]].node
        parts = [mpirun_path(self.session, job.hosts[0]), "--allow-run-as-root", "--hostfile", HOSTFILE]
        parts += ["-np", str(job.ranks)]
        parts += ["--npernode", str(job.per_node), "--bind-to", "none"]
        parts += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
        ifname = settings.launcher_ifname
        if ifname:
            parts += ["--mca", "btl_tcp_if_include", ifname, "--mca", "oob_tcp_if_include", ifname]
        prefix = first.mpi.install_prefix
        if prefix:
            parts += ["--prefix", prefix]
        for key, value in job.env.items():
            parts += ["-x", f"{key}={value}"]
        parts += ["-x", "PATH", "-x", "LD_LIBRARY_PATH", *job.program]
        return first.mpi.site_env + " ".join(shlex.quote(p) for p in parts)

    def job(self, job: Job, settings: AllReduceGate, timeout_s: int) -> tuple[CommandResult, str]:
        """Run `job`; (its result, the command that launched it)."""
        command = self.job_command(job, settings, timeout_s)
        lines = "".join(f"{self.session.inventory.hosts[h].address} slots={job.per_node}\n" for h in job.hosts)
        write = f"printf %s {shlex.quote(lines)} > {HOSTFILE}"
        return self.session.run(job.hosts[0], f"{write} && {command}", timeout_s), command


class SlurmLauncher(Launcher):
    """srun from the node, on the nodes' Slurm names, holding them exclusively for the workload."""

    via = "slurm"
    start_s = IMMEDIATE_S  # srun may wait that long for its nodes

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.token = secrets.token_hex(4)

    def stop(self, host: str) -> None:
        """This launcher's srun still waiting for its nodes (or running) is stopped, which cancels
        its job; other runs' jobs are left alone."""
        self.session.run(host, f"pkill -f {sh(f'^srun .*--job-name=rdmaprov-[a-z_]+-{self.token} ')} || true")

    def _node(self, host: str) -> str:
        slurm = self.session.inventory.slurm
        return slurm.node_name(host) if slurm else host

    def srun(self, hosts: list[str], timeout_s: int, name: str, tasks_per_node: int, gpus: int) -> list[str]:
        """srun's own words: the nodes, held exclusively for at most the gate's deadline."""
        words = ["srun", f"--job-name=rdmaprov-{name}-{self.token}", f"--nodes={len(hosts)}"]
        words.append(f"--ntasks-per-node={tasks_per_node}")
        words += [f"--ntasks={tasks_per_node * len(hosts)}", f"--nodelist={','.join(self._node(h) for h in hosts)}"]
        words += ["--exclusive", f"--time={max(1, math.ceil(timeout_s / 60))}", f"--immediate={IMMEDIATE_S}"]
        if gpus:
            words.append(f"--gres=gpu:{gpus}")
        return words

    def run(self, host: str, command: str, timeout_s: int, gpus: int = 0) -> CommandResult:
        words = self.srun([host], timeout_s, "gate", 1, gpus) + ["sh", "-c", command]
        return self.session.run(host, sh_join(words), timeout_s + IMMEDIATE_S)

    def job_command(self, job: Job, settings: AllReduceGate, timeout_s: int) -> str:
        """srun with Slurm's PMI (no hostfile, no SSH between nodes); OpenMPI's TCP-only launcher
        settings go as its environment (OMPI_MCA_*), like mpirun's --mca, with the workload's."""
        slurm = self.session.inventory.slurm
        env = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self"}
        if settings.launcher_ifname:
            env["OMPI_MCA_btl_tcp_if_include"] = settings.launcher_ifname
        env.update(job.env)
        words = ["env", *(f"{k}={v}" for k, v in env.items())]
        words += self.srun(job.hosts, timeout_s, job.name, job.per_node, job.gpus_per_node)
        words.insert(words.index("srun") + 1, f"--mpi={slurm.mpi if slurm else 'pmix'}")
        command = sh_join(words + job.program)
        # what mpirun's --prefix does: the ranks find that MPI (srun passes the environment on)
        return self.session.inventory.hosts[job.hosts[0]].node.mpi.site_env + command

    def job(self, job: Job, settings: AllReduceGate, timeout_s: int) -> tuple[CommandResult, str]:
        command = self.job_command(job, settings, timeout_s)
        return self.session.run(job.hosts[0], command, timeout_s + IMMEDIATE_S), command


def launcher(session: Session) -> Launcher:
    """The launcher the inventory's gates ask for (gates.via, or --gates-via)."""
    return SlurmLauncher(session) if session.inventory.gates.via == "slurm" else Launcher(session)
