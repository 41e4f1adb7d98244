"""`rdmaprov verify`: check the selected nodes (and run the gates) without planning any deploy.

The outcome is a RunResult with no host runs, only verifications and gates, so that it prints,
exits and writes JUnit through the same code as apply and check.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from rdmaprov.engine.results import RunResult
from rdmaprov.health.verify import post_deploy
from rdmaprov.inventory.model import Inventory


def verify(
    inventory: Inventory, hosts: list[str], gates: bool, diagnose: bool = True, dcgm_level: int = 1
) -> RunResult:
    """Verify `hosts` against the inventory, then run the gates over them if `gates` is set (and
    the diagnosis after a failed cluster gate, if `diagnose` is); DCGM's diagnostic at
    `dcgm_level` on GPU nodes that have DCGM."""
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result = RunResult("verify", str(inventory.path), inventory.name, started_at)
    health = post_deploy(inventory, hosts, gates=gates, diagnose=diagnose, dcgm_level=dcgm_level)
    result.verify, result.gates, result.diagnosis = health.verify, health.gates, health.diagnosis
    result.duration_s = time.monotonic() - started
    return result
