"""systemd units: enabled (and started) as declared."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, StringCommand, operation


class UnitEnabled(FactBase):
    """`systemctl is-enabled UNIT`: 'enabled', 'disabled', 'not-found'... ('' without systemd)."""

    def command(self, unit: str) -> str:
        return f"systemctl is-enabled {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else "not-found"

    @staticmethod
    def default() -> str:
        return "not-found"


@operation()
def unit_enabled(unit: str, enabled: bool = True, start: bool = False):
    """Enable (and with start, start now) a unit; with enabled=False, disable it if it exists."""
    state = host.get_fact(UnitEnabled, unit=unit)
    quoted = shlex.quote(unit)
    if enabled and state != "enabled":
        yield StringCommand(f"systemctl enable {'--now ' if start else ''}{quoted}")
    elif not enabled and state == "enabled":
        yield StringCommand(f"systemctl disable {quoted}")
    else:
        host.noop(f"{unit} is {state}")
