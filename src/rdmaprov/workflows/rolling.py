"""Applies a batch of hosts at a time (`--serial N|P%`), stopping when a batch fails too much.

Each batch is applied, rebooted where a setting needs it (only with --allow-reboot) and
verified before the next one starts, so a bad change reaches one batch, not the fleet. The
gates run once at the end, over every host that came out healthy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from rdmaprov.engine import RunOptions, RunResult, run
from rdmaprov.engine.results import HostResult
from rdmaprov.errors import UserError
from rdmaprov.inventory.model import Inventory

_SERIAL = re.compile(r"^(\d+)(%?)$")


def batch_size(serial: str | None, total: int) -> int:
    """Hosts per batch for `--serial N` or `--serial P%` (a percentage rounds up, at least 1)."""
    if serial is None:
        return max(total, 1)
    match = _SERIAL.match(serial.strip())
    if not match or int(match.group(1)) == 0 or (match.group(2) and int(match.group(1)) > 100):
        raise UserError(
            f"--serial {serial}: give a number of hosts (e.g. 4) or a percentage from 1% to 100% (e.g. 25%)"
        )
    count = int(match.group(1))
    return max(1, math.ceil(total * count / 100)) if match.group(2) else count


def parse_max_fail(text: str | None) -> float | None:
    """`--max-fail P%` as a fraction (None: never stop)."""
    if text is None:
        return None
    match = re.match(r"^(\d+(?:\.\d+)?)%?$", text.strip())
    if not match or float(match.group(1)) > 100:
        raise UserError(f"--max-fail {text}: give a percentage from 0% to 100% (e.g. 20%)")
    return float(match.group(1)) / 100


def batches(hosts: list[str], size: int) -> list[list[str]]:
    return [hosts[i : i + size] for i in range(0, len(hosts), size)]


@dataclass
class Hooks:
    """What happens around each batch's apply (the CLI wires reboot, verify, progress)."""

    after_batch: Callable[[RunResult, list[str]], None]
    log: Callable[[str], None]


def rolling_apply(
    inventory: Inventory, options: RunOptions, size: int, max_fail: float | None, hooks: Hooks, observer=None
) -> RunResult:
    """Apply `options.hosts` in batches of `size`; hosts after a batch over `max_fail` are skipped."""
    merged: RunResult | None = None
    groups = batches(options.hosts, size)
    for number, batch in enumerate(groups, 1):
        if len(groups) > 1:
            hooks.log(f"batch {number}/{len(groups)}: {', '.join(batch)}")
        result = run(inventory, RunOptions(options.command, batch, options.deploys, options.host_deploys), observer)
        for host in result.hosts:
            host.batch = number
        if not result.interrupted:
            hooks.after_batch(result, batch)
        merged = result if merged is None else _merge(merged, result)
        if result.interrupted:
            merged.hosts.extend(
                HostResult(name, inventory.hosts[name].address, status="skipped", error="not run: interrupted", batch=n)
                for n, group in enumerate(groups[number:], number + 1)
                for name in group
            )
            break
        failed = {h.name for h in result.hosts if h.status in ("failed", "unreachable")} | {
            v.name for v in result.verify or [] if v.status != "ok"
        }
        if max_fail is not None and len(failed) / len(batch) > max_fail and number < len(groups):
            reason = (
                f"not run: {len(failed)} of {len(batch)} hosts in batch {number} failed, over --max-fail "
                f"{max_fail * 100:g}%"
            )
            hooks.log(reason)
            merged.hosts.extend(
                HostResult(name, inventory.hosts[name].address, status="skipped", error=reason, batch=n)
                for n, group in enumerate(groups[number:], number + 1)
                for name in group
            )
            break
    assert merged is not None
    return merged


def _merge(into: RunResult, more: RunResult) -> RunResult:
    into.hosts.extend(more.hosts)
    into.duration_s += more.duration_s
    into.interrupted = into.interrupted or more.interrupted
    if more.verify is not None:
        into.verify = (into.verify or []) + more.verify
    return into
