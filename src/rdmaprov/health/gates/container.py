"""Gate: ib_write_bw between containers of the site's own image on the ib_write_bw gate's pairs,
started by the node's podman with nothing but what rdmaprov's containers.conf gives every
container (deploys/containers.py). It passes where a training job in that image could use the
fabric, and judges the figure like the host's ib_write_bw gate; a failure says what the container
lacked and where (parsers/container.py): the image or perftest in it, the RDMA device, the HCA's
verbs provider, locked memory.
"""

from __future__ import annotations

from dataclasses import replace

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.ib_write_bw import bandwidth_tool, judge_bandwidth, pair_bounds, run_first_lane
from rdmaprov.health.gates.pairs import gate_pairs, run_in_rounds
from rdmaprov.health.gates.perftest import LaneOutput, pair_problem
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.parsers.container import container_lack
from rdmaprov.parsers.node import NodeReport

GATE = "container"


def _lacked(output: LaneOutput, image: str) -> tuple[str, str] | None:
    """(the host, what its container lacked), the client's side first: it is the one that ran."""
    lane = output.lane
    for host, text, device in ((lane.client.host, output.client, lane.client.device),
                               (lane.server.host, output.server, lane.server.device)):  # fmt: skip
        lack = container_lack(text, image, device)
        if lack:
            return host, lack
    return None


def _without_runtime(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> str:
    """Why the pair cannot run containers at all ("" when it can): a node that cannot be reached,
    or one rdmaprov set up no container runtime on."""
    problem = pair_problem(session, server, client, reports)
    if problem:
        return problem
    for name in (server, client):
        if not session.inventory.hosts[name].node.containers.enabled:
            return f"{name} has no container runtime from rdmaprov (containers.runtime: none): set it to podman"
    return ""


def run_container_pair(session: Session, server: str, client: str, reports: dict[str, NodeReport]) -> GateResult:
    """ib_write_bw from a container on the server's first RDMA device to one on the client's."""
    inventory = session.inventory
    image, settings = inventory.gates.container.image, inventory.gates.ib_write_bw
    subject = Subject.pair(server, client)
    why = _without_runtime(session, server, client, reports)
    if why:
        return GateResult(GATE, subject, False, why, details={"image": image})
    tool = replace(bandwidth_tool(settings), image=image)
    output = run_first_lane(session, GATE, server, client, reports, tool)
    if not isinstance(output, LaneOutput):
        [result] = output
        lack = container_lack(result.reason, image)  # the server never listened: its device is not known here
        reason = f"{lack} (on {server}): {result.reason}" if lack else result.reason
        return replace(result, reason=reason, details={**result.details, "image": image})
    lacked = _lacked(output, image)
    details = {"image": image, "via": output.via, "rail": output.lane.rail}
    if lacked:
        host, lack = lacked
        return GateResult(GATE, subject, False, f"{lack} (on {host})", details={**details, "host": host})
    result = judge_bandwidth(GATE, subject, output, pair_bounds(settings))
    return replace(result, details={**result.details, "image": image})


def run_container_gate(
    session: Session, hosts: list[str], reports: dict[str, NodeReport], newcomers: list[str] | None = None
) -> list[GateResult]:
    """The ib_write_bw gate's pairs, in containers, in rounds where no node is in two pairs at once."""
    pairs = gate_pairs(session.inventory.gates.ib_write_bw.pairs, hosts, newcomers)
    return run_in_rounds(GATE, pairs, lambda server, client: [run_container_pair(session, server, client, reports)])
