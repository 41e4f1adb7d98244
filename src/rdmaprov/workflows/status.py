"""`rdmaprov status`: the fleet as the nodes' own checks last found it, read from Slurm through one
SSH session (slurm/status.py says why no node is asked itself).

The source is the controller in mode full; on a site's own Slurm (mode health_check), the
controller if the inventory names one, else the selected Slurm hosts in turn, each a node whose
scontrol asks the controller: the first that answers is the source, and the result names it.
"""

from __future__ import annotations

import re
import time

from rdmaprov.engine.session import HostLost, Session
from rdmaprov.errors import Problem, UserError
from rdmaprov.inventory.model import Inventory
from rdmaprov.parsers.slurm import parse_scontrol_nodes
from rdmaprov.slurm.status import FleetStatus, fleet

# The source's clock first (reasons carry the controller's local time: the source is the controller,
# or a node of the same site, whose clock NTP keeps close), then every node in one line each, their
# reasons' stamps in ISO form whatever the login's SLURM_TIME_FORMAT.
COMMAND = "date +%Y-%m-%dT%H:%M:%S && SLURM_TIME_FORMAT=standard scontrol -o show node"
TIMEOUT_S = 60
# On a site's Slurm without a named controller: how many hosts are tried before giving up.
TRIES = 3


def sources(inventory: Inventory, hosts: list[str]) -> list[str]:
    """The hosts whose scontrol may answer, in the order they are tried."""
    slurm = inventory.slurm
    assert slurm is not None
    if slurm.controller:
        return [slurm.controller]
    return slurm.compute_hosts(hosts)[:TRIES]


def read(result: FleetStatus, text: str, inventory: Inventory, hosts: list[str]) -> None:
    """Fill `result` from COMMAND's output. The controller is judged only where Slurm has a node
    of its name: in mode health_check every host is a Slurm host, but the one that runs slurmctld
    need not be a node."""
    slurm = inventory.slurm
    assert slurm is not None
    clock, _, text = text.partition("\n")
    result.read_at = clock.strip() if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", clock.strip()) else ""
    nodes = parse_scontrol_nodes(text)
    known = {n.name for n in nodes}
    members = [
        h for h in slurm.compute_hosts(hosts) if h != slurm.controller or slurm.node_name(h) in known or slurm.manages
    ]
    result.nodes = fleet(members, {h: slurm.node_name(h) for h in members}, nodes)


def fleet_status(inventory: Inventory, hosts: list[str]) -> FleetStatus:
    """The selected Slurm hosts' statuses, from the first source that answers."""
    if inventory.slurm is None:
        raise UserError(
            Problem(
                str(inventory.path),
                "status reads what the nodes' own checks left in Slurm, and this inventory declares no Slurm",
                fix="enable cluster.slurm (mode health_check on a site's own Slurm), or run `rdmaprov verify` "
                "to check the nodes over SSH",
            )
        )
    started = time.monotonic()
    result = FleetStatus(inventory.name, "", "")
    for source in sources(inventory, hosts):
        with Session(inventory, [source]) as session:
            if source in session.unreachable:
                result.unread[source] = session.unreachable[source]
                continue
            try:
                answer = session.run(source, COMMAND, timeout_s=TIMEOUT_S)
            except HostLost as exc:
                result.unread[source] = str(exc)
                continue
        if answer.ok and "NodeName=" in answer.stdout:
            result.source = source
            read(result, answer.stdout, inventory, hosts)
            break
        said = (answer.stderr.strip().splitlines() or ["no node in its answer"])[-1]
        result.unread[source] = f"scontrol -o show node: {said}"
    result.duration_s = time.monotonic() - started
    return result
