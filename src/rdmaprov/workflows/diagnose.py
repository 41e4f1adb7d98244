"""`rdmaprov diagnose`: which node makes the cluster slow, by pair tests in two rounds
(health/diagnose.py), then the node gate on the suspects; all through one set of connections."""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.diagnose import Diagnosis, localize
from rdmaprov.health.gates.ib_write_bw import run_pairs
from rdmaprov.health.gates.node import run_node_gate
from rdmaprov.health.verify import read_reports
from rdmaprov.inventory.model import Inventory
from rdmaprov.parsers.node import NodeReport


def diagnose(inventory: Inventory, hosts: list[str]) -> Diagnosis:
    with Session(inventory, hosts) as session:
        reports = read_reports(session)
        readable = {name: r for name, r in reports.items() if isinstance(r, NodeReport)}
        names = [name for name in hosts if name in readable]
        diagnosis = localize(names, lambda pairs: run_pairs(session, pairs, readable))
        for name in hosts:
            if name not in readable:
                why = session.unreachable.get(name) or f"could not read the node's state: {reports.get(name)}"
                diagnosis.suspects[name] = [f"{name} is unreachable or unreadable: {why}"]
        suspects = [name for name in hosts if name in diagnosis.suspects and name in readable]
        if suspects:
            diagnosis.tests += run_node_gate(session, suspects, readable)
    return diagnosis
