"""Gate: the site's own workload, launched the way its jobs are, judged on what it did and printed.

Every other gate proves the fabric with a tool rdmaprov chose. A job can still fail where they
pass: its framework brings its own NCCL, which may not find the HCAs or the net plugin and fall
back to TCP sockets without an error; its launcher may bind another interface. This gate runs the
site's command (a torchrun benchmark line, an MPI program) across the selected nodes with the
gates' launcher and the nodes' NCCL environment, NCCL reporting its transport (INIT, NET), then
reads from the log which network each host's NCCL used (a Socket fallback fails, naming hosts and
ranks) and the figure the inventory says how to read, held to its bounds and to its own past.

Each process gets what a multi-node launcher needs, whatever launched it: RDMAPROV_NNODES,
RDMAPROV_NODE_RANK, RDMAPROV_NPROC_PER_NODE, RDMAPROV_RANK, RDMAPROV_MASTER_ADDR (the first
node's address) and RDMAPROV_MASTER_PORT.
"""

from __future__ import annotations

from dataclasses import replace

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.all_reduce import job_mpi, job_over, nccl_transport, refusal, skewed, transport_checked
from rdmaprov.health.gates.bandwidth import Verdict, failed
from rdmaprov.health.gates.launch import Job, launcher
from rdmaprov.health.gates.mpi import shown
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.gates import Figure, WorkloadGate
from rdmaprov.parsers.figure import TAKE, Figures, read_figures
from rdmaprov.parsers.mpi import mpirun_exit_code, split_job_log
from rdmaprov.parsers.nccl_debug import NcclTransport
from rdmaprov.parsers.node import NodeReport

GATE = "workload"
# Each process's place in the job, from whichever launcher started it (OpenMPI's mpirun, PMIx,
# srun), as a multi-node launcher such as torchrun wants it.
# Under srun the nodes are numbered in Slurm's order, not the inventory's: the master is the
# job's first node, at the address Slurm has for it.
PLACE = (
    'RDMAPROV_RANK="${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}"; '
    'RDMAPROV_NODE_RANK="${SLURM_NODEID:-$((RDMAPROV_RANK / RDMAPROV_NPROC_PER_NODE))}"; '
    'if [ -n "$SLURM_JOB_NODELIST" ]; then first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1); '
    "addr=$(scontrol show node \"$first\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p'); "
    'RDMAPROV_MASTER_ADDR="${addr:-$RDMAPROV_MASTER_ADDR}"; fi; '
    "export RDMAPROV_RANK RDMAPROV_NODE_RANK RDMAPROV_MASTER_ADDR; "
)
# How many of the log's last distinct lines (every rank may print the same) a failure quotes.
TAIL_LINES = 3
REPORT_CHARS = 400  # of Open MPI's own report, when that is all there is


def workload_job(session: Session, hosts: list[str], settings: WorkloadGate, gpus: int) -> Job:
    """The site's command as one job across `hosts`: `per_node` processes on each, each in its
    own `sh -c` (the command is the site's shell line, passed as one quoted word), with the first
    node's NCCL environment, NCCL's transport report on, and each process's place in the job."""
    first = session.inventory.hosts[hosts[0]]
    env, _ = first.node.nccl_environment()
    env = {
        **env,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "RDMAPROV_NNODES": str(len(hosts)),
        "RDMAPROV_NPROC_PER_NODE": str(settings.per_node),
        "RDMAPROV_MASTER_ADDR": first.address,
        "RDMAPROV_MASTER_PORT": str(settings.master_port),
    }
    return Job(hosts, settings.per_node, env, ["sh", "-c", PLACE + settings.command], gpus, GATE)


def last_words(log: str) -> str:
    """What a failure quotes: the program's last distinct lines, without mpirun's boxed reports
    or the NCCL INFO lines the gate itself asked for; when the program printed nothing (it never
    started: no such file, no SSH agent), Open MPI's last report, which says why."""
    job = split_job_log(log)
    lines = [line.strip() for line in job.program if " NCCL INFO " not in line]
    said = " | ".join(list(dict.fromkeys(reversed(lines)))[:TAIL_LINES][::-1])
    return said or (f"Open MPI: {job.launcher[-1][:REPORT_CHARS]}" if job.launcher else "no output")


def judge_figure(figures: Figures, figure: Figure) -> Verdict:
    """The figure taken from what the pattern read, held to the inventory's bounds, the sums shown."""
    values = figures.values
    if not values:
        caught = f": it caught {len(figures.rejected)}, e.g. {figures.rejected[0]!r}" if figures.rejected else ""
        return failed(
            f"the figure's pattern {figure.pattern!r} read no plain number in the output{caught}", figure.unit
        )
    value = TAKE[figure.take](values)
    of = f"{figure.take} of {len(values)} matches" if len(values) > 1 else "the one match"
    low, high = figure.minimum, figure.maximum
    said = f"{value:g} {figure.unit} ({of})"
    if low is not None and value < low:
        return Verdict("fail", value, low, figure.unit, f"{said} < min {low:g} {figure.unit}")
    if high is not None and value > high:
        return Verdict("fail", value, high, figure.unit, f"{said} > max {high:g} {figure.unit}")
    held = " and ".join(f"{name} {bound:g}" for name, bound in (("min", low), ("max", high)) if bound is not None)
    within = f" within {held} {figure.unit}" if held else " (no bound set: only its baseline judges it)"
    threshold = low if not figure.lower_is_better and low is not None else high
    return Verdict("pass", value, threshold, figure.unit, said + within)


def transport_required(transport: NcclTransport, verdict: Verdict) -> Verdict:
    """A passing run whose log never says which network NCCL used proves nothing about RDMA: the
    program did not use NCCL, or its own settings turned NCCL's report off."""
    if not verdict.passed or transport.reported:
        return verdict
    why = "no NCCL line says which network it used (the program did not use NCCL, or overrode NCCL_DEBUG)"
    fix = "a workload without NCCL sets require_rdma: false"
    return replace(verdict, status="fail", reason=f"{verdict.reason}, but {why}; {fix}")


def run_workload(session: Session, hosts: list[str], reports: dict[str, NodeReport]) -> GateResult:
    """The gate over `hosts`, or the subset `workload.hosts` names."""
    settings = session.inventory.gates.workload
    return job_over(GATE, session, settings.hosts, hosts, lambda over: workload_over(session, over, reports, settings))


def workload_over(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], settings: WorkloadGate
) -> GateResult:
    """Run the command once across exactly `hosts` and judge its exit, its transport and its figure."""
    subject = Subject.job(hosts)
    if not hosts:
        return GateResult(GATE, subject, False, "no host selected to run it on")
    refused = refusal(GATE, session, hosts, reports, alone=True)
    if refused is not None:
        return refused
    versions, mixed = job_mpi(GATE, session, hosts)
    if mixed is not None:
        return mixed
    mpi = shown(versions)
    gpus = len(reports[hosts[0]].gpus)
    launch = launcher(session)
    job = workload_job(session, hosts, settings, gpus)
    result, command = launch.job(job, session.inventory.gates.all_reduce, settings.timeout_s)
    launched = f"{'srun' if launch.via == 'slurm' else 'mpirun'} from {hosts[0]}"
    log = result.stdout + "\n" + result.stderr
    tail = last_words(log)
    transport = nccl_transport(log, hosts, reports)
    unit = settings.figure.unit if settings.figure else ""
    figures = read_figures(log, settings.figure.pattern) if settings.figure else Figures([], [])
    if result.timed_out:
        verdict = failed(f"{launched} did not finish within timeout_s {settings.timeout_s} s: {tail}", unit)
    elif not result.ok:
        code = mpirun_exit_code(log)
        verdict = failed(
            f"{launched} exited with an error{f' (a process exited {code})' if code else ''}: {tail}", unit
        )
    elif settings.figure is not None:
        verdict = judge_figure(figures, settings.figure)
    else:
        verdict = Verdict("pass", None, None, "", "the workload finished")
    if settings.require_rdma and not result.timed_out:
        verdict = transport_required(transport, transport_checked(session, hosts, transport, verdict))
    details = {
        "via": launch.via,
        "command": command,
        "processes": settings.per_node * len(hosts),
        "mpi": mpi,
        "transport": {host: sorted(nets) for host, nets in transport.networks.items()},
        "hcas": {host: sorted(devices) for host, devices in transport.devices.items()},
        "ranks": {host: sorted(ranks) for host, ranks in transport.ranks.items()},
        "better": settings.figure.better if settings.figure else None,
        "figures": figures.values,
    }
    return skewed(GateResult.of(GATE, subject, verdict, 1, details), versions)
