"""Gate: ib_write_bw between containers of the site's own image on the ib_write_bw gate's pairs,
every rail of a pair at once (as the rail gate runs them on the host), started by the node's
podman with nothing but what rdmaprov's containers.conf gives every container, or by
rdmaprov-docker-run, the `docker run` its jobs use (deploys/containers.py): a training job in
the image uses every HCA, so each one is tested from inside it. It passes where such a job
could use the fabric, and judges each figure like the host's ib_write_bw gate; a failure says
what the container lacked and where (parsers/container.py): the image or perftest in it, the
RDMA device, the HCA's verbs provider, locked memory. Where the latency gate runs, each rail
whose bandwidth passed in the image is then held to the same p99 bound with ib_write_lat in it
(container_latency: results of its own, so that no report, metric or baseline takes a p99 for a
bandwidth): the image's own verbs libraries are in the path of every small message a job sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.bandwidth import Bounds
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, bandwidth_tool, judge_bandwidth, pair_bounds
from rdmaprov.health.gates.latency import LATENCY_BASE_PORT, latency_limit, latency_tool
from rdmaprov.health.gates.latency import judge_lane as judge_latency_lane
from rdmaprov.health.gates.pairs import gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import Lane, LaneOutput, Tool, judged_lanes, nodes_problem, pair_lanes
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.gates import LatencyGate
from rdmaprov.parsers.container import container_lack
from rdmaprov.parsers.node import NodeReport

GATE = "container"
LATENCY_GATE = "container_latency"


def _lacked(output: LaneOutput, image: str) -> tuple[str, str] | None:
    """(the host, what its container lacked), the client's side first: it is the one that ran."""
    lane = output.lane
    for side, text in ((lane.client, output.client), (lane.server, output.server)):
        lack = container_lack(text, image, side.device, side.runtime)
        if lack:
            return side.host, lack
    return None


def _without_runtime(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> str:
    """Why the pair cannot run containers at all ("" when it can): a node that cannot be reached,
    or one rdmaprov set up no container runtime on."""
    problem = nodes_problem(session, (server, client), reports)
    if problem:
        return problem
    for name in (server, client):
        if not session.inventory.hosts[name].node.containers.enabled:
            return (
                f"{name} has no container runtime from rdmaprov (containers.runtime: none): set it to podman or docker"
            )
    return ""


def judge_lane(
    output: LaneOutput, image: str, subject: Subject, figure: Callable[[LaneOutput], GateResult], gate: str = GATE
) -> GateResult:
    """One lane's verdict under `gate`: what a container lacked, first (its figure, if any, means
    nothing then), else `figure`'s judgement of the client's output, as the host's gate would
    judge it."""
    lacked = _lacked(output, image)
    if lacked:
        host, lack = lacked
        details = {"image": image, "via": output.via, "rail": output.lane.rail, "host": host}
        return GateResult(gate, subject, False, f"{lack} (on {host})", details=details)
    result = figure(output)
    return replace(result, subject=subject, details={**result.details, "image": image})


def bandwidth_figure(bounds: Bounds) -> Callable[[LaneOutput], GateResult]:
    """ib_write_bw's figure against the link's rate, as the ib_write_bw gate judges it."""
    return lambda output: judge_bandwidth(GATE, output.lane.subject, output, bounds)


def latency_figure(settings: LatencyGate, limit: tuple[float, str]) -> Callable[[LaneOutput], GateResult]:
    """ib_write_lat's p99 against the latency gate's bound, as a container_latency result."""
    return lambda output: replace(judge_latency_lane(output, settings, limit), gate=LATENCY_GATE)


def run_container_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> list[GateResult]:
    """ib_write_bw between containers on every rail both nodes have, at once; then, where the
    latency gate runs, ib_write_lat on each rail that passed. A pair with one rail keeps the pair
    as its subject (`node1 -> node2`); with several, each rail is named by its HCAs as the rail
    gate names them."""
    inventory = session.inventory
    image, settings = inventory.gates.container.image, inventory.gates.ib_write_bw
    why = _without_runtime(session, server, client, reports)
    if why:
        return [GateResult(GATE, Subject.pair(server, client), False, why, details={"image": image})]
    lanes, results, _ = pair_lanes(session, GATE, server, client, reports, TCP_PORT)
    results = [replace(r, details={**r.details, "image": image}) for r in results]
    single = len(lanes) == 1 and not results

    def subject(lane: Lane) -> Subject:
        return Subject.pair(server, client) if single else lane.subject

    def run(gate: str, tool: Tool, ran: list[Lane], figure: Callable[[LaneOutput], GateResult]) -> list[GateResult]:
        def unheard(lane: Lane, why: str) -> GateResult:  # the server never listened: its device is not known here
            lack = container_lack(why, image, runtime=lane.server.runtime)
            reason = f"{lack} (on {server}): {why}" if lack else why
            return GateResult(gate, subject(lane), False, reason, details={"image": image, "rail": lane.rail})

        def judge(output: LaneOutput) -> GateResult:
            return judge_lane(output, image, subject(output.lane), figure, gate)

        return judged_lanes(session, replace(tool, image=image), ran, judge, unheard)

    bandwidth = (
        run(GATE, bandwidth_tool(settings, "ib_write_bw"), lanes, bandwidth_figure(pair_bounds(settings)))
        if lanes
        else []
    )
    latency = inventory.gates.latency
    limit = latency_limit(latency, inventory.hosts[server].node.fabric)
    passed = [lane for lane, result in zip(lanes, bandwidth, strict=True) if result.passed]
    if not (latency.enabled and limit and passed):
        return results + bandwidth
    ports = [replace(lane, tcp_port=LATENCY_BASE_PORT + lane.rail) for lane in passed]
    return results + bandwidth + run(LATENCY_GATE, latency_tool(latency), ports, latency_figure(latency, limit))


def run_container_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The ib_write_bw gate's pairs, every rail in containers, in rounds where no node is in two pairs at once."""
    pairs = gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers)
    return run_in_rounds(GATE, pairs, lambda server, client: run_container_pair(session, server, client, reports))
