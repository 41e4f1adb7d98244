"""Reboots that settings need (netns mode, drivers): only when asked, a batch at a time, each host
waited for until SSH answers again from a new boot."""

from __future__ import annotations

import time
from collections.abc import Callable

from rdmaprov.engine.session import Session
from rdmaprov.inventory.model import Inventory

BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def _boot_ids(inventory: Inventory, names: list[str]) -> dict[str, str]:
    with Session(inventory, names) as session:
        found = session.each(session.connected, lambda name: session.run(name, BOOT_ID).stdout.strip())
    return {name: value for name, value in found.items() if isinstance(value, str) and value}


def reboot(
    inventory: Inventory, names: list[str], batch_size: int, timeout_s: int = 900, log: Callable[[str], None] = print
) -> dict[str, str | None]:
    """Reboot `names`, `batch_size` at a time; {name: None when back on a new boot, else why not}."""
    outcome: dict[str, str | None] = {}
    for start in range(0, len(names), max(1, batch_size)):
        batch = names[start : start + max(1, batch_size)]
        before = _boot_ids(inventory, batch)
        for name in batch:
            if name not in before:
                outcome[name] = "could not be reached before the reboot"
        todo = [name for name in batch if name in before]
        if not todo:
            continue
        log(f"rebooting {', '.join(todo)}…")
        with Session(inventory, todo) as session:
            # The connection drops as the host goes down: the command's own result means nothing.
            session.each(
                session.connected, lambda name: session.run(name, "(sleep 1; systemctl reboot) >/dev/null 2>&1 &")
            )
        deadline = time.monotonic() + timeout_s
        waiting = set(todo)
        while waiting and time.monotonic() < deadline:
            time.sleep(5)
            now = _boot_ids(inventory, sorted(waiting))
            for name, boot_id in now.items():
                if boot_id != before[name]:
                    waiting.discard(name)
                    outcome[name] = None
                    log(f"{name} is back")
        for name in waiting:
            outcome[name] = f"did not come back within {timeout_s}s"
        if any(outcome[name] for name in todo):
            break  # a batch that did not come back stops the rolling reboot
    for name in names:
        outcome.setdefault(name, "not rebooted: an earlier batch failed")
    return outcome
