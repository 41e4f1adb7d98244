"""Gate: allreduce across the nodes with mpirun, judged on out-of-place busbw at the largest size.

With GPUs and nccl-tests on every node it runs `all_reduce_perf`; where there is no GPU (the lab,
CPU clusters) the same sweep runs through rdmaprov's CPU probe over MPI. Both outputs become the
same rows, judged by the same formula. mpirun's own traffic goes over TCP (`pml ob1`, `btl
tcp,self`): UCX over some RDMA devices aborts (irdma without SRQ, rxe), and NCCL or the probe's
MPI carry the data.
"""

from __future__ import annotations

import json
import shlex

from rdmaprov.deploys.gate_tools import PROBE_BINARY
from rdmaprov.engine.session import Session
from rdmaprov.health.gates.bandwidth import algbw_gbs, allreduce_busbw_gbs, gbps_to_gbs, judge, parse_size
from rdmaprov.health.gates.result import GateResult
from rdmaprov.inventory.config import AllReduceGate, NodeConfig
from rdmaprov.parsers.nccl_tests import CollectiveRow, CollectiveRun, parse_nccl_tests
from rdmaprov.parsers.node import NodeReport
from rdmaprov.health.checks import expected_devices

HOSTFILE = "/tmp/rdmaprov-allreduce-hosts"


def parse_probe_output(text: str) -> CollectiveRun:
    """The CPU probe's JSON lines → the rows nccl-tests would print (algbw/busbw computed here)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith('{"probe"'):
            continue
        item = json.loads(line)
        size, time_us, ranks = int(item["size"]), float(item["time_us"]), int(item["ranks"])
        rows.append(CollectiveRow(size, int(item["count"]), item["type"], item["redop"], time_us,
                                  algbw_gbs(size, time_us), allreduce_busbw_gbs(size, time_us, ranks), int(item["wrong"])))
    return CollectiveRun(rows, None, None)


def nic_bandwidth_gbs(node: NodeConfig, report: NodeReport | None) -> float | None:
    """Per-node NIC bandwidth in GB/s: compute devices × declared (else measured) port rate."""
    devices = expected_devices(node, report) if report else list(node.rdma.devices)
    if not devices:
        return None
    rate = node.rdma.rate_gbps
    if rate is None and report:
        port = report.port(devices[0], node.rdma.port)
        rate = port.rate_gbps if port and port.rate_gbps else None
    return gbps_to_gbs(rate * len(devices)) if rate else None


def mpirun_command(hosts: list[str], session: Session, per_node: int, use_gpus: bool) -> tuple[str, int]:
    """The mpirun line run on the first host (`per_node` ranks on each), and the rank count."""
    inventory = session.inventory
    settings = inventory.gates.all_reduce
    first = inventory.hosts[hosts[0]].node
    ranks = per_node * len(hosts)
    env, _ = first.nccl_environment()
    env = {**env, "NCCL_ALGO": "Ring"}
    parts = ["mpirun", "--allow-run-as-root", "--hostfile", HOSTFILE, "-np", str(ranks), "--npernode", str(per_node), "--bind-to", "none",
             "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    ifname = settings.launcher_ifname
    if ifname:
        parts += ["--mca", "btl_tcp_if_include", ifname, "--mca", "oob_tcp_if_include", ifname]
    prefix = first.mpi.install_prefix
    if prefix:
        parts += ["--prefix", prefix]
    for key, value in env.items():
        parts += ["-x", f"{key}={value}"]
    parts += ["-x", "PATH", "-x", "LD_LIBRARY_PATH"]
    low, high = settings.min_bytes, settings.max_bytes
    if use_gpus:
        parts += [first.nccl.all_reduce_perf, "-b", low, "-e", high, "-f", "2", "-g", "1", "-c", "1", "-o", "sum"]
    else:
        parts += [PROBE_BINARY, str(parse_size(low)), str(parse_size(high))]
    return " ".join(shlex.quote(p) for p in parts), ranks


def hostfile(hosts: list[str], session: Session, slots: int) -> str:
    return "".join(f"{session.inventory.hosts[name].address} slots={slots}\n" for name in hosts)


def judge_run(run: CollectiveRun, settings: AllReduceGate, nic_gbs: float | None) -> tuple[bool, str, float | None, float | None]:
    """(passed, reason, measured busbw, threshold) for one run's rows."""
    if not run.rows:
        return False, "no result rows in the output", None, None
    wrong = sum(r.wrong or 0 for r in run.rows) + sum(r.in_place_wrong or 0 for r in run.rows)
    if wrong or run.out_of_bounds:
        return False, f"wrong results: {wrong} wrong elements, {run.out_of_bounds or 0} out-of-bounds values", None, None
    largest = max(run.rows, key=lambda r: r.size)
    verdict = judge(largest.busbw, "GB/s", minimum=settings.min_busbw_gbs, fraction=settings.fraction, reference=nic_gbs, what="the per-node NIC bandwidth")
    return verdict.passed, f"busbw at {largest.size} B: {verdict.reason}", largest.busbw, verdict.threshold


def run_all_reduce(session: Session, hosts: list[str], reports: dict[str, NodeReport]) -> GateResult:
    settings = session.inventory.gates.all_reduce
    hosts = [h for h in (settings.hosts or hosts) if h in session.inventory.hosts]
    subject = ",".join(hosts)
    down = [h for h in hosts if h in session.unreachable or not isinstance(reports.get(h), NodeReport)]
    if down:
        return GateResult("all_reduce", subject, False, f"cannot run across {', '.join(down)}: not reachable or not readable")
    if len(hosts) < 2:
        return GateResult("all_reduce", subject, False, "needs at least two hosts")
    use_gpus = all(reports[h].gpus for h in hosts)
    launcher = hosts[0]
    per_node = len(reports[launcher].gpus) if use_gpus else 1  # one rank per GPU, else per node
    command, ranks = mpirun_command(hosts, session, per_node, use_gpus)
    write = f"printf %s {shlex.quote(hostfile(hosts, session, per_node))} > {HOSTFILE}"
    nic = nic_bandwidth_gbs(session.inventory.hosts[launcher].node, reports[launcher])
    retries = settings.retries
    reason, measured, threshold, attempt = "", None, None, 0
    for attempt in range(1, retries + 2):
        result = session.run(launcher, f"{write} && {command}", settings.timeout_s)
        run = parse_nccl_tests(result.stdout) if use_gpus else parse_probe_output(result.stdout)
        if not run.rows:
            tail = [line for line in (result.stderr + "\n" + result.stdout).splitlines() if line.strip()][-3:]
            reason = f"mpirun on {launcher} gave no results: {' | '.join(tail) or 'no output'}"
            continue
        passed, reason, measured, threshold = judge_run(run, settings, nic)
        details = {"kind": "nccl-tests" if use_gpus else "cpu-probe", "ranks": ranks, "command": command,
                   "rows": [{"size": r.size, "time_us": r.time_us, "algbw": round(r.algbw, 6), "busbw": round(r.busbw, 6), "wrong": r.wrong} for r in run.rows]}
        if passed:
            return GateResult("all_reduce", subject, True, reason, measured, threshold, "GB/s", attempt, details)
    return GateResult("all_reduce", subject, False, reason, measured, threshold, "GB/s", attempt, {"command": command})
