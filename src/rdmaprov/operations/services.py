"""systemd units: enabled at boot as declared."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from rdmaprov.facts.system import UnitActive, UnitEnabled


@operation()
def unit_enabled(unit: str, enabled: bool = True):
    """Enable a unit at boot; with enabled=False, disable it if it is enabled."""
    state = host.get_fact(UnitEnabled, unit=unit)
    quoted = shlex.quote(unit)
    if enabled and state != "enabled":
        yield StringCommand(f"systemctl enable {quoted}")
    elif not enabled and state == "enabled":
        yield StringCommand(f"systemctl disable {quoted}")
    else:
        host.noop(f"{unit} is {state}")


@operation()
def unit_running(unit: str, running: bool = True):
    """A long-running service: started when it should run, stopped when it should not."""
    active = host.get_fact(UnitActive, unit=unit)
    quoted = shlex.quote(unit)
    if running and active != "active":
        yield StringCommand(f"systemctl start {quoted}")
    elif not running and active == "active":
        yield StringCommand(f"systemctl stop {quoted}")
    else:
        host.noop(f"{unit} is {active}")
