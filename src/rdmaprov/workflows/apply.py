"""The whole apply: converge a batch at a time, reboot where asked, verify each batch, gate at the end.

`apply` and `bootstrap` both go through here; they differ in which hosts run which deploys and
which hosts the checks and gates look at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rdmaprov.engine import RunOptions, RunResult
from rdmaprov.engine.reboot import reboot
from rdmaprov.health.verify import HostVerification, post_deploy
from rdmaprov.inventory.model import Inventory
from rdmaprov.workflows.rolling import Hooks, batch_size, rolling_apply


@dataclass
class ConvergeSettings:
    serial: str | None = None  # --serial N|P%: hosts per batch (None: all at once)
    max_fail: float | None = None  # stop after a batch where more than this fraction failed
    allow_reboot: bool = False
    verify: bool = True
    gates: bool = True
    diagnose: bool = True  # run the diagnosis when a cluster gate fails
    verify_hosts: list[str] | None = None  # None: the hosts applied
    newcomers: list[str] = field(default_factory=list)  # bootstrap: gates pair these with old nodes


def _reboot_owed(
    inventory: Inventory, result: RunResult, batch: list[str], size: int, log: Callable[[str], None]
) -> None:
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


def _not_applied(status: str) -> str:
    """Why a host that apply did not converge is left out of the gates (its error says more)."""
    return {
        "unreachable": "it could not be reached",
        "skipped": "apply did not run on it (an earlier batch failed over --max-fail)",
    }.get(status, "apply failed on it")


def _gate_picker(
    result: RunResult, applied: list[str], scope: set[str] | None, log: Callable[[str], None]
) -> Callable[[list[HostVerification] | None], list[str]]:
    """What chooses the hosts the gates run over once verify is known: the applied hosts that
    passed it (in inventory order; hosts outside the verify scope, bootstrap's old nodes, need
    not have been verified), at least two; each host left out goes into result.gates_not_run."""

    def gate_hosts(verifications: list[HostVerification] | None) -> list[str]:
        passed = {v.name for v in verifications or [] if v.status == "ok"}
        chosen = [name for name in applied if name in passed or scope is not None and name not in scope]
        for name in applied:
            if name not in chosen:
                result.gates_not_run[name] = "it failed verify"
        if len(chosen) < 2:
            for name in chosen:
                result.gates_not_run[name] = (
                    f"only {name} was left to test, and apply gates two hosts or more "
                    "(`rdmaprov verify --gates` tests one)"
                )
            return []
        log(f"gates over {len(chosen)} hosts…")
        return chosen

    return gate_hosts


def converge(
    inventory: Inventory, options: RunOptions, settings: ConvergeSettings, log: Callable[[str], None], observer=None
) -> RunResult:
    started = time.monotonic()
    size = batch_size(settings.serial, len(options.hosts))
    # Without --serial a whole-cluster apply still reboots one host at a time.
    reboot_size = size if settings.serial else 1
    scope = set(settings.verify_hosts) if settings.verify_hosts is not None else None
    # One batch: verify and the gates share one set of SSH connections at the end.
    together = settings.verify and settings.gates and size >= len(options.hosts)

    def healthy(result: RunResult) -> list[str]:
        return [
            h.name
            for h in result.hosts
            if h.status not in ("failed", "unreachable", "interrupted") and (scope is None or h.name in scope)
        ]

    def after_batch(result: RunResult, batch: list[str]) -> None:
        if settings.allow_reboot:
            _reboot_owed(inventory, result, batch, reboot_size, log)
        verify = healthy(result)
        if settings.verify and verify and not together:
            log(f"verify on {len(verify)} hosts…")
            result.verify = post_deploy(inventory, verify, gates=False).verify

    result = rolling_apply(inventory, options, size, settings.max_fail, Hooks(after_batch, log), observer)
    wanted_gates = settings.verify and settings.gates
    if result.interrupted:
        if wanted_gates:
            result.gates_not_run = {h.name: "the run was interrupted (Ctrl-C)" for h in result.hosts}
        return result  # no verify and no gates: the operator asked to stop
    applied = [
        name
        for name in inventory.host_names()
        if name in {h.name for h in result.hosts if h.status not in ("failed", "unreachable", "skipped")}
    ]
    if wanted_gates:
        result.gates_not_run = {h.name: _not_applied(h.status) for h in result.hosts if h.name not in applied}

    gate_hosts = _gate_picker(result, applied, scope, log)
    newcomers = settings.newcomers or None
    if together and applied:
        verify = healthy(result)
        if verify:
            log(f"verify on {len(verify)} hosts…")
        health = post_deploy(
            inventory,
            verify,
            gates=True,
            verify=bool(verify),
            newcomers=newcomers,
            gate_hosts=gate_hosts,
            connect=applied,
            diagnose=settings.diagnose,
        )
        result.gates, result.diagnosis = health.gates, health.diagnosis
        if verify:
            result.verify = health.verify
    elif settings.verify and settings.gates:
        chosen = gate_hosts(result.verify)
        if chosen:
            health = post_deploy(
                inventory, chosen, gates=True, verify=False, newcomers=newcomers, diagnose=settings.diagnose
            )
            result.gates, result.diagnosis = health.gates, health.diagnosis
    result.duration_s = time.monotonic() - started
    return result
