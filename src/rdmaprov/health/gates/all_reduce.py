"""Gate: allreduce across the nodes, judged on out-of-place busbw at the largest size.

With GPUs and nccl-tests on every node it runs `all_reduce_perf`; where there is no GPU (the lab,
CPU clusters) the same sweep runs through rdmaprov's CPU probe over MPI. Both outputs become the
same rows, judged by the same formula. mpirun with a hostfile or srun launches it (launch.py);
MPI's own traffic goes over TCP either way, and NCCL or the probe's MPI carry the data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace

from rdmaprov.engine.session import HostLost, Session
from rdmaprov.health.checks import expected_devices
from rdmaprov.health.gates.bandwidth import (
    Bounds,
    Reference,
    Verdict,
    algbw_gbs,
    allreduce_busbw_gbs,
    failed,
    gbps_to_gbs,
    judge,
)
from rdmaprov.health.gates.deadline import ITERATIONS, bytes_per_rank, slowest_link, sweep_deadline
from rdmaprov.health.gates.launch import Job, launcher
from rdmaprov.health.gates.mpi import mixed_mpi_reason, read_mpi_versions, shown, version_skew
from rdmaprov.health.gates.pairs import Pair, run_in_rounds
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.gates import AllReduceGate
from rdmaprov.parsers.mpi import MpiVersion
from rdmaprov.parsers.nccl_debug import NcclTransport, parse_nccl_transport
from rdmaprov.parsers.nccl_tests import CollectiveRow, CollectiveRun, parse_nccl_tests
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.units import parse_size
from rdmaprov.paths import PROBE_BINARY


def parse_probe_output(text: str, max_bytes: int) -> CollectiveRun:
    """The CPU probe's JSON lines → the rows nccl-tests would print (algbw/busbw computed here);
    complete when the sweep got to its last size (the next doubling would pass `max_bytes`)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith('{"probe"'):
            continue
        item = json.loads(line)
        size, time_us, ranks = int(item["size"]), float(item["time_us"]), int(item["ranks"])
        rows.append(
            CollectiveRow(
                size,
                int(item["count"]),
                item["type"],
                item["redop"],
                time_us,
                algbw_gbs(size, time_us),
                allreduce_busbw_gbs(size, time_us, ranks),
                int(item["wrong"]),
            )
        )
    return CollectiveRun(rows, None, None, complete=bool(rows) and rows[-1].size * 2 > max_bytes)


def nic_bandwidth(node: NodeConfig, report: NodeReport | None) -> Reference | None:
    """Per-node NIC bandwidth in GB/s: compute devices × declared (else measured) port rate."""
    devices = expected_devices(node, report) if report else list(node.rdma.devices)
    if not devices:
        return None
    rate = node.rdma.rate_gbps
    if rate is None and report:
        port = report.port(devices[0], node.rdma.port)
        rate = port.rate_gbps if port and port.rate_gbps else None
    if not rate:
        return None
    value = gbps_to_gbs(rate * len(devices))
    hcas = f"{len(devices)} HCA{'s' if len(devices) > 1 else ''}"
    return Reference(value, f"{hcas} × {rate:g} Gb/s ÷ 8 = {value:.4g} GB/s", "the per-node NIC bandwidth")


def workload(hosts: list[str], session: Session, per_node: int, use_gpus: bool) -> Job:
    """The sweep: all_reduce_perf (one rank per GPU) or the CPU probe (one rank per node), with the
    inventory's NCCL environment, Ring, and NCCL reporting the transport it chose (INIT, NET): the
    gate checks it is not TCP sockets."""
    settings = session.inventory.gates.all_reduce
    first = session.inventory.hosts[hosts[0]].node
    env, _ = first.nccl_environment()
    env = {**env, "NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    low, high = settings.min_bytes, settings.max_bytes
    if use_gpus:
        program = [first.nccl.all_reduce_perf, "-b", low, "-e", high, "-f", "2", "-g", "1", "-c", "1", "-o", "sum"]
    else:
        program = [PROBE_BINARY, str(parse_size(low)), str(parse_size(high))]
    return Job(hosts, per_node, env, program, per_node if use_gpus else 0)


def judge_run(run: CollectiveRun, bounds: Bounds, nic: Reference | None) -> Verdict:
    """The verdict on one run: only a complete, successful sweep with no wrong element in either
    column passes; a size printed twice counts at its slowest."""
    if run.failures:
        return failed(f"the run failed: {run.failures[0]}", "GB/s")
    if not run.rows:
        return failed("no result rows in the output", "GB/s")
    if not run.complete:
        return failed(
            f"the output ends after {len(run.rows)} rows (largest {max(r.size for r in run.rows)} B) "
            "without the sweep's end: the run did not finish",
            "GB/s",
        )
    wrong = sum(r.wrong or 0 for r in run.rows) + sum(r.in_place_wrong or 0 for r in run.rows)
    if wrong or run.out_of_bounds:
        return failed(f"wrong results: {wrong} wrong elements, {run.out_of_bounds or 0} out-of-bounds values", "GB/s")
    top = max(r.size for r in run.rows)
    largest = min((r for r in run.rows if r.size == top), key=lambda r: r.busbw)
    verdict = judge(largest.busbw, "GB/s", bounds, nic)
    return replace(verdict, reason=f"busbw at {largest.size} B: {verdict.reason}")


def all_reduce_bounds(settings: AllReduceGate) -> Bounds:
    return Bounds(settings.fraction, settings.warn_fraction, settings.max_fraction, settings.min_busbw_gbs)


def transport_verdict(
    transport: NcclTransport, storage: set[str], verdict: Verdict, plugin: str | None = None
) -> Verdict:
    """Fail a run whose numbers passed when NCCL fell back to TCP sockets, opened one of the
    `storage` HCAs, or could not load the net `plugin` the nodes declare (it then runs on its
    internal transports, which on eRDMA is not what the cluster was built for)."""
    sockets = transport.socket_hosts()
    if sockets:
        why = " (NET/IB: no device found)" if transport.no_ib_device & set(sockets) else ""
        return replace(
            verdict,
            status="fail",
            reason=f"NCCL used TCP sockets, not RDMA, on {transport.named(sockets)}{why}: {verdict.reason}",
        )
    opened = {(host, d) for host, devices in transport.devices.items() for d in devices if d in storage}
    if opened:
        named = ", ".join(f"{device} on {host}" for host, device in sorted(opened))
        return replace(verdict, status="fail", reason=f"NCCL opened storage HCA(s) {named}: {verdict.reason}")
    if plugin and transport.plugin_missing:
        hosts = ", ".join(f"{host} ({why})" for host, why in sorted(transport.plugin_missing.items()))
        return replace(
            verdict, status="fail", reason=f"NCCL did not load the {plugin} net plugin on {hosts}: {verdict.reason}"
        )
    return verdict


def run_all_reduce(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], pairs: list[GateResult]
) -> GateResult:
    """The gate over `hosts`, or the subset `all_reduce.hosts` names."""
    wanted = session.inventory.gates.all_reduce.hosts
    return job_over("all_reduce", session, wanted, hosts, lambda over: all_reduce_over(session, over, reports, pairs))


def job_over(
    gate: str, session: Session, wanted: tuple[str, ...], hosts: list[str], run: Callable[[list[str]], GateResult]
) -> GateResult:
    """`run` a gate's one job across the hosts it names (`wanted`, else `hosts`) that the
    inventory has; a node lost mid-run ends the job, and the gate says which and when."""
    over = [h for h in (wanted or hosts) if h in session.inventory.hosts]
    try:
        return run(over)
    except HostLost as lost:
        return GateResult.broken(gate, Subject.job(over), lost)


def job_mpi(gate: str, session: Session, hosts: list[str]) -> tuple[dict[str, MpiVersion | str], GateResult | None]:
    """Each node's MPI (`mpirun --version`), and the refusal when their series cannot share a job."""
    versions = read_mpi_versions(session, hosts)
    mixed = mixed_mpi_reason(versions)
    if not mixed:
        return versions, None
    details = {"mpi": shown(versions), "mixed_mpi": True}
    return versions, GateResult(gate, Subject.job(hosts), False, mixed, details=details)


def run_all_reduce_pairs(session: Session, pairs: list[Pair], reports: dict[str, NodeReport]) -> list[GateResult]:
    """An all_reduce over each pair of nodes, pairs sharing no node at once (diagnose's pair test
    where ib_write_bw is off)."""
    return run_in_rounds(
        "all_reduce", pairs, lambda server, client: [all_reduce_over(session, [server, client], reports, [])]
    )


def all_reduce_over(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], pairs: list[GateResult]
) -> GateResult:
    """The gate over exactly `hosts`, its deadline scaled to the slowest of the ib_write_bw `pairs`
    just measured. A run stopped at its deadline is not retried: the fabric, not chance, stopped it."""
    settings = session.inventory.gates.all_reduce
    subject = Subject.job(hosts)
    refused = refusal("all_reduce", session, hosts, reports)
    if refused is not None:
        return refused
    versions, mixed = job_mpi("all_reduce", session, hosts)
    if mixed is not None:
        return mixed
    mpi = shown(versions)
    use_gpus = all(reports[h].gpus for h in hosts)
    first = hosts[0]
    per_node = len(reports[first].gpus) if use_gpus else 1  # one rank per GPU, else per node
    job = workload(hosts, session, per_node, use_gpus)
    ranks = job.ranks
    nic = nic_bandwidth(session.inventory.hosts[first].node, reports[first])
    kind = "nccl-tests" if use_gpus else "cpu-probe"
    low, high = parse_size(settings.min_bytes), parse_size(settings.max_bytes)
    deadline = sweep_deadline(
        settings.timeout_s,
        bytes_per_rank(low, high, ranks, ITERATIONS[kind]),
        slowest_link(pairs, hosts),
        all_reduce_bounds(settings).threshold(nic),
    )
    launch = launcher(session)
    launched = f"{'srun' if launch.via == 'slurm' else 'mpirun'} from {first}"
    verdict, attempt = failed("not run", "GB/s"), 0
    for attempt in range(1, settings.retries + 2):
        rows: list[dict[str, float | None]] = []  # the sweep of this attempt, kept with its verdict
        result, command = launch.job(job, settings, deadline.seconds)
        if result.timed_out:
            verdict = failed(f"{launched} did not finish within its deadline of {deadline}", "GB/s")
            break
        run = parse_nccl_tests(result.stdout) if use_gpus else parse_probe_output(result.stdout, high)
        rows = sweep_rows(run)
        tail = [line for line in (result.stderr + "\n" + result.stdout).splitlines() if line.strip()][-3:]
        if not run.rows:
            verdict = failed(f"{launched} gave no results: {' | '.join(tail) or 'no output'}", "GB/s")
            continue
        verdict = judge_run(run, all_reduce_bounds(settings), nic)
        if verdict.passed and not result.ok:
            verdict = replace(
                verdict,
                status="fail",
                reason=f"{launched} exited with an error after the sweep: {' | '.join(tail)}",
            )
        transport = nccl_transport(result.stdout + "\n" + result.stderr, hosts, reports) if use_gpus else None
        if verdict.passed and transport is not None:
            verdict = transport_checked(session, hosts, transport, verdict)
        details = {
            "kind": kind,
            "ranks": ranks,
            "via": launch.via,
            "deadline_s": deadline.seconds,
            "command": command,
            "mpi": mpi,
            "transport": {host: sorted(nets) for host, nets in transport.networks.items()} if transport else None,
            "rows": rows,
        }
        if verdict.passed:
            return skewed(GateResult.of("all_reduce", subject, verdict, attempt, details), versions)
    details = {"command": command, "deadline_s": deadline.seconds, "via": launch.via, "mpi": mpi, "rows": rows}
    return skewed(GateResult.of("all_reduce", subject, verdict, attempt, details), versions)


def refusal(
    gate: str, session: Session, hosts: list[str], reports: dict[str, NodeReport], alone: bool = False
) -> GateResult | None:
    """Why a job across `hosts` does not run (a node lost or unreadable: a failure; one host,
    unless it may run `alone`: skipped, the node gate judges it), None when it can."""
    subject = Subject.job(hosts)
    lost = [str(session.lost[h]) for h in hosts if h in session.lost]
    if lost:
        return GateResult(gate, subject, False, f"not run: {'; '.join(lost)}")
    selected = {host.name for host in session.state.inventory}
    unselected = [h for h in hosts if h not in selected]
    if unselected:
        return GateResult(
            gate, subject, False, f"cannot run across {', '.join(unselected)}: not selected this run (--limit)"
        )
    down = [h for h in hosts if h in session.unreachable or not isinstance(reports.get(h), NodeReport)]
    if down:
        return GateResult(gate, subject, False, f"cannot run across {', '.join(down)}: not reachable or not readable")
    if len(hosts) < 2 and not alone:
        return GateResult(gate, subject, True, "skipped (one host: the node gate judges it alone)", status="skipped")
    return None


def nccl_transport(log: str, hosts: list[str], reports: Mapping[str, NodeReport]) -> NcclTransport:
    """What NCCL's INFO lines in a job's `log` say, by the inventory's names of `hosts`: NCCL names
    each node by its own host name up to the first dot, which need not be the inventory's. A name
    several nodes share (cloned images) cannot say which: it is shown with the nodes it may be."""
    holders: dict[str, list[str]] = {}
    for host in hosts:
        if isinstance(report := reports.get(host), NodeReport) and report.hostname:
            holders.setdefault(report.hostname.split(".")[0], []).append(host)
    names = {
        name: found[0] if len(found) == 1 else f"{name} (host name of {', '.join(found)})"
        for name, found in holders.items()
    }
    return parse_nccl_transport(log).renamed(names)


def transport_checked(session: Session, hosts: list[str], transport: NcclTransport, verdict: Verdict) -> Verdict:
    """A passing NCCL run held to what it must have used: RDMA, no storage HCA, and on eRDMA nodes
    that declare it the AIACC net plugin."""
    nodes = [session.inventory.hosts[h].node for h in hosts]
    storage = {d for node in nodes for d in node.rdma.storage_hcas}
    plugin = "AIACC" if any(n.fabric == "erdma" and n.erdma.aiacc_plugin for n in nodes) else None
    return transport_verdict(transport, storage, verdict, plugin)


def sweep_rows(run: CollectiveRun) -> list[dict[str, float | None]]:
    """Each size of the sweep as the JSON details give it (the report draws busbw against size)."""
    return [_row(row) for row in run.rows]


def _row(row: CollectiveRow) -> dict[str, float | None]:
    """One size of the sweep as the JSON details give it."""
    return {
        "size": row.size,
        "time_us": row.time_us,
        "algbw": round(row.algbw, 6),
        "busbw": round(row.busbw, 6),
        "wrong": row.wrong,
    }


def skewed(result: GateResult, versions: dict[str, MpiVersion | str]) -> GateResult:
    """The verdict with the nodes' MPI version skew said (a pass becomes a warning)."""
    skew = version_skew(versions)
    if skew:
        result.reason += f"; {skew}"
        if result.status == "pass":
            result.status = "warn"
    return result
