"""Gate: ib_write_bw between containers of the site's own image on the ib_write_bw gate's pairs,
started by the node's podman with nothing but what rdmaprov's containers.conf gives every
container (deploys/containers.py). It passes where a training job in that image could use the
fabric, and judges the figure like the host's ib_write_bw gate; a failure says what the container
lacked (parsers/container.py): the image or perftest in it, the RDMA device, the HCA's verbs
provider, locked memory.
"""

from __future__ import annotations

from dataclasses import replace

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.ib_write_bw import TCP_PORT, bandwidth_tool, judge_bandwidth, pair_bounds
from rdmaprov.health.gates.pairs import gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import LaneOutput, pair_lanes, run_lanes
from rdmaprov.health.gates.result import GateResult
from rdmaprov.parsers.container import container_lack
from rdmaprov.parsers.node import NodeReport

GATE = "container"


def _lacked(output: LaneOutput, image: str) -> tuple[str, str] | None:
    """(the host, what its container lacked), the client's side first: it is the one that ran."""
    lane = output.lane
    for host, text, device in ((lane.client.host, output.client, lane.client.device),
                               (lane.server.host, output.server, lane.server.device)):  # fmt: skip
        lack = container_lack(text, device, image)
        if lack:
            return host, lack
    return None


def run_container_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> GateResult:
    """ib_write_bw from a container on the server's first RDMA device to one on the client's."""
    inventory = session.inventory
    image, settings = inventory.gates.container.image, inventory.gates.ib_write_bw
    subject = f"{server} -> {client}"
    for name in (server, client):
        if not inventory.hosts[name].node.containers.enabled:
            why = f"{name} has no container runtime from rdmaprov (containers.runtime: none): set it to podman"
            return GateResult(GATE, subject, False, why)
    lanes, problems, _ = pair_lanes(session, GATE, server, client, reports, TCP_PORT)
    if not lanes:
        return problems[0]
    tool = replace(bandwidth_tool(settings), image=image)
    outputs = run_lanes(session, tool, lanes[:1])
    if isinstance(outputs, str):
        lack = container_lack(outputs, lanes[0].server.device, image)
        return GateResult(GATE, subject, False, f"{lack} (on {server}): {outputs}" if lack else outputs)
    lacked = _lacked(outputs[0], image)
    if lacked:
        host, lack = lacked
        return GateResult(GATE, subject, False, f"{lack} (on {host})", details={"image": image, "host": host})
    result = judge_bandwidth(GATE, subject, outputs[0], pair_bounds(settings))
    return replace(result, details={**result.details, "image": image})


def run_container_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The ib_write_bw gate's pairs, in containers, in rounds where no node is in two pairs at once."""
    pairs = gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers)
    return run_in_rounds(GATE, pairs, lambda server, client: [run_container_pair(session, server, client, reports)])
