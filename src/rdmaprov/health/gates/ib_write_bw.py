"""Gate: ib_write_bw between pairs of nodes (a ring by default), pairs sharing no node at once, on
each node's first RDMA device: the quick check that every node reaches its neighbours, whose
figures also scale the all_reduce deadline and feed `diagnose`. The rail gate (rail.py) tests
every HCA with the same runner (perftest.py).
"""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.bandwidth import Bounds, judge
from rdmaprov.health.gates.pairs import Pair, gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import (
    LaneOutput,
    Tool,
    failed_on_exit,
    no_result,
    pair_lanes,
    run_lanes,
)
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.gates import Bandwidth
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.perftest import parse_bw_output

TCP_PORT = 18515


def bandwidth_tool(settings: Bandwidth, gate: str) -> Tool:
    """ib_write_bw as `gates.<gate>` sets it (the container gate runs ib_write_bw's)."""
    args = ("-s", str(settings.size), "-D", str(settings.duration_s), "--report_gbits", "-F")
    return Tool("ib_write_bw", args, settings.timeout_s, f"gates.{gate}.timeout_s")


def pair_bounds(settings: Bandwidth) -> Bounds:
    """A pair's floor: the inventory's absolute min_gbps, else the fraction of the port rate."""
    return Bounds(settings.fraction, settings.warn_fraction, settings.max_fraction, settings.min_gbps)


def judge_bandwidth(gate: str, subject: Subject, output: LaneOutput, bounds: Bounds) -> GateResult:
    """The verdict on one lane's ib_write_bw: the client's figure against the link's rate."""
    lane = output.lane
    try:
        parsed = parse_bw_output(output.client)
        error = ""
    except ValueError as exc:
        parsed, error = None, str(exc)
    if parsed is None:
        return GateResult(gate, subject, False, no_result("ib_write_bw", output, error), details={"rail": lane.rail})
    verdict = failed_on_exit(
        judge(parsed.average_gbps, "Gb/s", bounds, lane.reference()), "ib_write_bw", output.client_status
    )
    details = {
        "via": output.via,
        "rail": lane.rail,
        "server_device": lane.server.device,
        "client_device": lane.client.device,
        "gid_index": lane.client.gid,
        "traffic_class": lane.client.tclass,  # roce_qos's ToS, None: perftest's default (0)
        "server_gpu": lane.server.gpu,
        "client_gpu": lane.client.gpu,
        "bytes": parsed.bytes,
        "iterations": parsed.iterations,
        "peak_gbps": parsed.peak_gbps,
    }
    return GateResult.of(gate, subject, verdict, details=details)


def run_first_lane(
    session: Session, gate: str, server: str, client: str, reports: dict[str, NodeReport], tool: Tool
) -> LaneOutput | list[GateResult]:
    """`tool` from the server's first RDMA device to the client's (the quick check: the rail gate
    tests them all): its output, or the failure that kept it from running."""
    lanes, problems, _ = pair_lanes(session, gate, server, client, reports, TCP_PORT)
    if not lanes:
        return problems
    outputs = run_lanes(session, tool, lanes[:1])
    if isinstance(outputs, str):
        return [GateResult(gate, Subject.pair(server, client), False, outputs)]
    return outputs[0]


def run_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> list[GateResult]:
    """ib_write_bw from the server's first RDMA device to the client's."""
    settings = session.inventory.gates.ib_write_bw
    output = run_first_lane(session, "ib_write_bw", server, client, reports, bandwidth_tool(settings, "ib_write_bw"))
    if not isinstance(output, LaneOutput):
        return output
    return [judge_bandwidth("ib_write_bw", Subject.pair(server, client), output, pair_bounds(settings))]


def run_ib_write_bw(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The pairs the inventory asks for, or with `newcomers` (bootstrap) each new node against an existing one."""
    return run_pairs(session, gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers), reports)


def run_pairs(session: Session, pairs: list[Pair], reports: dict[str, NodeReport]) -> list[GateResult]:
    """ib_write_bw for each (server, client) pair, in rounds where no node is in two pairs at once."""
    return run_in_rounds("ib_write_bw", pairs, lambda server, client: run_pair(session, server, client, reports))
