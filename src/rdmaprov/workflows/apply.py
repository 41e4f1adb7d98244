"""The whole apply: converge a batch at a time, reboot where asked, verify each batch, gate at the end.

`apply` and `bootstrap` both go through here; they differ in which hosts run which deploys and
which hosts the checks and gates look at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rdmaprov.workflows.rolling import Hooks, batch_size, rolling_apply
from rdmaprov.engine import RunOptions, RunResult
from rdmaprov.engine.reboot import reboot
from rdmaprov.inventory.model import Inventory
from rdmaprov.health.verify import post_deploy


@dataclass
class ConvergeSettings:
    serial: str | None = None  # --serial N|P%: hosts per batch (None: all at once)
    max_fail: float | None = None  # stop after a batch where more than this fraction failed
    allow_reboot: bool = False
    verify: bool = True
    gates: bool = True
    verify_hosts: list[str] | None = None  # None: the hosts applied
    newcomers: list[str] = field(default_factory=list)  # bootstrap: gates pair these with old nodes


def _reboot_owed(inventory: Inventory, result: RunResult, batch: list[str], size: int, log: Callable[[str], None]) -> None:
    owed = [h for h in result.hosts if h.reboot_required and h.name in batch]
    if not owed:
        return
    outcome = reboot(inventory, [h.name for h in owed], size, log=log)
    for host in owed:
        if outcome[host.name] is None:
            host.warnings.append(f"rebooted for: {'; '.join(host.reboot_required)}")
            host.reboot_required = []
        else:
            host.status, host.error = "failed", f"reboot: {outcome[host.name]}"


def converge(inventory: Inventory, options: RunOptions, settings: ConvergeSettings, log: Callable[[str], None], observer=None) -> RunResult:
    started = time.monotonic()
    size = batch_size(settings.serial, len(options.hosts))
    # Without --serial a whole-cluster apply still reboots one host at a time.
    reboot_size = size if settings.serial else 1
    scope = set(settings.verify_hosts) if settings.verify_hosts is not None else None

    def after_batch(result: RunResult, batch: list[str]) -> None:
        if settings.allow_reboot:
            _reboot_owed(inventory, result, batch, reboot_size, log)
        healthy = [h.name for h in result.hosts if h.status not in ("failed", "unreachable") and (scope is None or h.name in scope)]
        if settings.verify and healthy:
            log(f"verify on {len(healthy)} hosts…")
            result.verify, _ = post_deploy(inventory, healthy, gates=False)

    result = rolling_apply(inventory, options, size, settings.max_fail, Hooks(after_batch, log), observer)
    if settings.verify and settings.gates:
        passed = {v.name for v in result.verify or [] if v.status == "ok"}
        applied = {h.name for h in result.hosts if h.status not in ("failed", "unreachable", "skipped")}
        # in inventory order; hosts outside the verify scope (bootstrap's old nodes) need not have been verified
        gate_hosts = [name for name in inventory.host_names() if name in applied and (name in passed or scope is not None and name not in scope)]
        if len(gate_hosts) > 1:
            log(f"gates over {len(gate_hosts)} hosts…")
            _, result.gates = post_deploy(inventory, gate_hosts, gates=True, verify=False, newcomers=settings.newcomers or None)
    result.duration_s = time.monotonic() - started
    return result
