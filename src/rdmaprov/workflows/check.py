"""`rdmaprov check`: what apply would change and which facts no longer hold, changing nothing.

Every would-be change and every failed verify check is classified against the node's record of
its last apply (engine/applied.py): corrective, intentional or new; a failed check that no deploy
restores is manual.
"""

from __future__ import annotations

import time
from dataclasses import replace

from rdmaprov.engine import RunOptions, RunResult, run
from rdmaprov.engine.applied import classify_fact
from rdmaprov.engine.runner import Deploy
from rdmaprov.health.verify import HostVerification, post_deploy
from rdmaprov.inventory.model import Inventory


def classify_findings(inventory: Inventory, result: RunResult, verifications: list[HostVerification]) -> None:
    """Mark each failed check of each host corrective, intentional, new or manual."""
    hosts = {h.name: h for h in result.hosts}
    for verification in verifications:
        host = hosts.get(verification.name)
        if host is None:
            continue
        verification.findings = [
            f if f.ok else replace(f, drift=classify_fact(f.deploy, host.last_applied is not None, host.inputs_changed))
            for f in verification.findings
        ]


def drift_check(
    inventory: Inventory,
    hosts: list[str],
    deploys: list[Deploy],
    verify: bool,
    gates: bool,
    observer=None,
    diagnose: bool = True,
) -> RunResult:
    started = time.monotonic()
    result = run(inventory, RunOptions("check", hosts, deploys), observer)
    reached = [h.name for h in result.hosts if h.status != "unreachable"]
    if verify and gates:
        result.gates_not_run = {h.name: "it could not be reached" for h in result.hosts if h.name not in reached}
    if verify and reached:
        health = post_deploy(inventory, reached, gates=gates, diagnose=diagnose)
        result.verify, result.gates, result.diagnosis = health.verify, health.gates, health.diagnosis
        classify_findings(inventory, result, result.verify or [])
    result.duration_s = time.monotonic() - started
    return result
