"""Gate: every rail of each pair of nodes. Rail i is the i-th compute HCA in `rdma.devices`
(storage HCAs excluded) on both nodes, the HCAs a rail-optimised fabric connects through the same
leaf switch. All rails of a pair run at once, each on its own TCP port, with large messages, and
each HCA gets its own verdict against its own port rate: a cluster gate sees one slow HCA of
eight as 12 % less bandwidth, this gate names it.

Where the node has GPUs and GPUDirect RDMA works, each rail writes from and to the memory of the
GPU nearest its HCA (gpudirect.py), the path NCCL's traffic takes.
"""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.bandwidth import Bounds
from rdmaprov.health.gates.gpudirect import MemoryChoice
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool, judge_bandwidth
from rdmaprov.health.gates.pairs import Pair, gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import Lane, LaneOutput, judged_lanes, pair_lanes
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.gates import IbWriteBwGate, RailGate
from rdmaprov.parsers.node import NodeReport

RAIL_BASE_PORT = 18600


def rail_bounds(settings: RailGate, pair_gate: IbWriteBwGate) -> Bounds:
    """A rail's floor: its own min_gbps, else the pair gate's absolute floor (the same
    measurement, one HCA each: a SoftRoCE inventory written before the rail gate existed set only
    that one), else the fraction of the port rate."""
    minimum, source = settings.min_gbps, "gates.rail.min_gbps"
    if minimum is None and pair_gate.min_gbps is not None:
        minimum, source = pair_gate.min_gbps, "gates.ib_write_bw.min_gbps"
    return Bounds(settings.fraction, settings.warn_fraction, settings.max_fraction, minimum, source)


def gpudirect_missing(
    lanes: list[Lane], memory: dict[str, MemoryChoice], reports: dict[str, NodeReport]
) -> dict[Subject, str]:
    """{lane: why} for each lane with a side on a GPU node that would run in host memory: with
    `gpudirect: required` it fails without being run."""
    missing: dict[Subject, str] = {}
    for lane in lanes:
        for end in (lane.server, lane.client):
            if end.gpu is None and reports[end.host].gpus and lane.subject not in missing:
                missing[lane.subject] = f"GPUDirect required (gates.rail.gpudirect): {end.host}: {memory[end.name].why}"
    return missing


def run_rail_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> list[GateResult]:
    """Every rail of one pair at once, a verdict per HCA."""
    settings = session.inventory.gates.rail
    lanes, results, memory = pair_lanes(session, "rail", server, client, reports, RAIL_BASE_PORT, settings.gpudirect)
    if not lanes:
        return results
    if settings.gpudirect == "required":
        missing = gpudirect_missing(lanes, memory, reports)
        results += [GateResult("rail", subject, False, why) for subject, why in missing.items()]
        lanes = [lane for lane in lanes if lane.subject not in missing]
        if not lanes:
            return results
    bounds = rail_bounds(settings, session.inventory.gates.ib_write_bw)

    def judged(output: LaneOutput) -> GateResult:
        result = judge_bandwidth("rail", output.lane.subject, output, bounds)
        result.details["memory"] = {e.name: memory[e.name].why for e in (output.lane.server, output.lane.client)}
        return result

    return results + judged_lanes(
        session,
        bandwidth_tool(settings, "rail"),
        lanes,
        judged,
        lambda lane, why: GateResult("rail", lane.subject, False, why),
    )


def run_rails(session: Session, pairs: list[Pair], reports: dict[str, NodeReport]) -> list[GateResult]:
    """The rail gate over (server, client) pairs, pairs sharing no node at once."""
    return run_in_rounds("rail", pairs, lambda server, client: run_rail_pair(session, server, client, reports))


def run_rail_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The rail gate over the pairs ib_write_bw tests (ib_write_bw.pairs, or each newcomer against an
    existing node)."""
    return run_rails(session, gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers), reports)
