"""systemd units: enabled at boot and running as declared."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import UnitActive, UnitEnabled


def _converge(unit: str, state: str, on_state: str, wanted: bool | None, on: str, off: str) -> Iterator[StringCommand]:
    """`systemctl on|off UNIT` when the unit's state (`on_state` or not) differs from `wanted`."""
    if wanted is None:
        host.noop(f"{unit} is not managed here")
    elif wanted != (state == on_state):
        yield StringCommand(f"systemctl {on if wanted else off} {shlex.quote(unit)}")
    else:
        host.noop(f"{unit} is {state}")


@operation()
def unit_enabled(unit: str, enabled: bool | None = True):
    """Enable a unit at boot; with enabled=False, disable it if it is enabled; None: leave it be."""
    state = fact(UnitEnabled, unit=unit) if enabled is not None else ""
    yield from _converge(unit, state, "enabled", enabled, "enable", "disable")


@operation()
def unit_running(unit: str, running: bool | None = True):
    """A long-running service: started when it should run, stopped when it should not; None: leave it be."""
    state = fact(UnitActive, unit=unit) if running is not None else ""
    yield from _converge(unit, state, "active", running, "start", "stop")
