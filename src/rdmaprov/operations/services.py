"""systemd units: enabled at boot and running as declared."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import UnitActive, UnitEnabled


def _converge(unit: str, state: str, on_state: str, wanted: bool, on: str, off: str) -> Iterator[StringCommand]:
    """`systemctl on|off UNIT` when the unit's state (`on_state` or not) differs from `wanted`."""
    if wanted != (state == on_state):
        yield StringCommand(f"systemctl {on if wanted else off} {shlex.quote(unit)}")
    else:
        host.noop(f"{unit} is {state}")


@operation()
def unit_enabled(unit: str, enabled: bool = True):
    """Enable a unit at boot; with enabled=False, disable it if it is enabled."""
    yield from _converge(unit, fact(UnitEnabled, unit=unit), "enabled", enabled, "enable", "disable")


@operation()
def unit_running(unit: str, running: bool = True):
    """A long-running service: started when it should run, stopped when it should not."""
    yield from _converge(unit, fact(UnitActive, unit=unit), "active", running, "start", "stop")
