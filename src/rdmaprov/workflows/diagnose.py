"""`rdmaprov diagnose`: which node makes the cluster slow (health/diagnose.py), over one set of
connections: pair tests in two rounds, the suspects' rails, the node gate on the suspects."""

from __future__ import annotations

from rdmaprov.engine.session import Session
from rdmaprov.health.diagnose import Diagnosis, diagnose_in
from rdmaprov.health.verify import read_reports
from rdmaprov.inventory.model import Inventory


def diagnose(inventory: Inventory, hosts: list[str]) -> Diagnosis:
    with Session(inventory, hosts) as session:
        return diagnose_in(session, hosts, read_reports(session))
