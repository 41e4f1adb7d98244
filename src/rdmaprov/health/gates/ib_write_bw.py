"""Gate: ib_write_bw between pairs of nodes (a ring by default), pairs sharing no node at once.

Server and client use the node's RDMA device and GID index; the server is started first and the
client dials only once the server listens; every process is bounded by a timeout and a stray
server is killed whatever happens.
"""

from __future__ import annotations

import time

import gevent

from rdmaprov.engine.session import Session
from rdmaprov.health.checks import expected_devices
from rdmaprov.health.gates.bandwidth import Bounds, Reference, judge
from rdmaprov.health.gates.result import GateResult
from rdmaprov.inventory.config import IbWriteBwGate, NodeConfig
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.perftest import parse_bw_output
from rdmaprov.quoting import sh_join

TCP_PORT = 18515


def ring_pairs(names: list[str]) -> list[tuple[str, str]]:
    """(server, client): each node to the next, the last back to the first (one pair for two nodes)."""
    if len(names) < 2:
        return []
    if len(names) == 2:
        return [(names[0], names[1])]
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]


def all_pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def newcomer_pairs(names: list[str], newcomers: list[str]) -> list[tuple[str, str]]:
    """(existing, new): each new node against an existing one, spread round-robin; with no
    existing node reachable, the new nodes in a ring among themselves."""
    existing = [n for n in names if n not in newcomers]
    if not existing:
        return ring_pairs(newcomers)
    return [(existing[i % len(existing)], new) for i, new in enumerate(newcomers)]


def rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Group pairs so that no node is in two pairs of the same round (greedy, order kept)."""
    remaining = list(pairs)
    out: list[list[tuple[str, str]]] = []
    while remaining:
        busy: set[str] = set()
        this_round = []
        for pair in list(remaining):
            if not busy & set(pair):
                this_round.append(pair)
                busy |= set(pair)
                remaining.remove(pair)
        out.append(this_round)
    return out


def endpoint(node: NodeConfig, report: NodeReport) -> tuple[str, int, int, float | None]:
    """(device, port, GID index, port rate in Gb/s) this node uses for the test.

    The declared rate wins over sysfs: some drivers (irdma) report a 4X width on a 1-lane 25G
    port, which would hold the link to a rate it can never reach.
    """
    devices = expected_devices(node, report)
    if not devices:
        raise ValueError("no RDMA device to test: declare rdma.devices")
    port = node.rdma.port
    gid = node.gid_index
    rate = node.rdma.rate_gbps
    if rate is None:
        found = report.port(devices[0], port)
        rate = found.rate_gbps if found and found.rate_gbps else None
    return devices[0], port, gid if gid is not None else 0, rate


def perftest_command(device: str, port: int, gid: int, settings: IbWriteBwGate, server: str | None = None) -> str:
    """The exact ib_write_bw command line; with `server`, the client that dials it."""
    parts = [
        "ib_write_bw",
        "-d",
        device,
        "-i",
        str(port),
        "-x",
        str(gid),
        "-p",
        str(TCP_PORT),
        "-s",
        str(settings.size),
        "-D",
        str(settings.duration_s),
        "--report_gbits",
        "-F",
    ]
    if server:
        parts.append(server)
    return sh_join(parts)


def _listening(session: Session, name: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if session.run(name, f"ss -tln | grep -q ':{TCP_PORT} '").ok:
            return True
        gevent.sleep(0.5)
    return False


def run_pair(
    session: Session, server: str, client: str, reports: dict[str, NodeReport], settings: IbWriteBwGate
) -> GateResult:
    inventory = session.inventory
    subject = f"{server} -> {client}"
    timeout = settings.timeout_s
    for name in (server, client):
        if name in session.unreachable:
            return GateResult("ib_write_bw", subject, False, f"{name} is unreachable: {session.unreachable[name]}")
    try:
        s_dev, s_port, s_gid, rate = endpoint(inventory.hosts[server].node, reports[server])
        c_dev, c_port, c_gid, _ = endpoint(inventory.hosts[client].node, reports[client])
    except ValueError as exc:
        return GateResult("ib_write_bw", subject, False, str(exc))
    server_job = gevent.spawn(session.run, server, perftest_command(s_dev, s_port, s_gid, settings), timeout)
    try:
        if not _listening(session, server, time.monotonic() + min(timeout, 30)):
            return GateResult(
                "ib_write_bw",
                subject,
                False,
                f"the ib_write_bw server on {server} did not start listening on port {TCP_PORT}",
            )
        client_result = session.run(
            client, perftest_command(c_dev, c_port, c_gid, settings, inventory.hosts[server].address), timeout
        )
        server_job.join(timeout=10)
    finally:
        if not server_job.ready():
            session.run(server, f"pkill -f 'ib_write_bw .*-p {TCP_PORT}' || true")
            server_job.join(timeout=10)
    try:
        parsed = parse_bw_output(client_result.stdout)
    except ValueError as exc:
        parsed, error = None, str(exc)
    else:
        error = ""
    if parsed is None:
        tail = (client_result.stderr or client_result.stdout).strip().splitlines()[-3:]
        return GateResult(
            "ib_write_bw",
            subject,
            False,
            f"ib_write_bw on {client} gave no result{': ' + error if error else ''}: {' | '.join(tail) or 'no output'}",
        )
    bounds = Bounds(settings.fraction, settings.warn_fraction, settings.max_fraction, settings.min_gbps)
    reference = Reference(rate, f"{s_dev} at {rate:g} Gb/s", "the port rate") if rate else None
    verdict = judge(parsed.average_gbps, "Gb/s", bounds, reference)
    details = {
        "server_device": s_dev,
        "client_device": c_dev,
        "gid_index": c_gid,
        "bytes": parsed.bytes,
        "iterations": parsed.iterations,
        "peak_gbps": parsed.peak_gbps,
    }
    return GateResult.of("ib_write_bw", subject, verdict, details=details)


def run_ib_write_bw(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The pairs the inventory asks for, or with `newcomers` (bootstrap) each new node against an existing one."""
    settings = session.inventory.gates.ib_write_bw
    if newcomers:
        pairs = newcomer_pairs(hosts, newcomers)
    else:
        pairs = all_pairs(hosts) if settings.pairs == "all" else ring_pairs(hosts)
    return run_pairs(session, pairs, reports)


def run_pairs(session: Session, pairs: list[tuple[str, str]], reports: dict[str, NodeReport]) -> list[GateResult]:
    """ib_write_bw for each (server, client) pair, in rounds where no node is in two pairs at once."""
    settings = session.inventory.gates.ib_write_bw
    results: list[GateResult] = []
    for batch in rounds(pairs):
        jobs = [gevent.spawn(run_pair, session, server, client, reports, settings) for server, client in batch]
        gevent.joinall(jobs)
        results.extend(
            job.get()
            if job.successful()
            else GateResult("ib_write_bw", f"{pair[0]} -> {pair[1]}", False, f"gate crashed: {job.exception}")
            for job, pair in zip(jobs, batch, strict=True)
        )
    return results
