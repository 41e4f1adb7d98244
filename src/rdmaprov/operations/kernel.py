"""Kernel modules: loaded now and at every boot."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.system import LoadedModules


@operation()
def module_loaded(module: str, present: bool = True):
    """Load `module` now if it is not loaded (boot-time loading is a modules-load.d file)."""
    loaded = fact(LoadedModules)
    if not present or module in loaded:
        host.noop(f"{module} {'loaded' if present else 'not wanted'}")
        return
    yield StringCommand(f"modprobe {shlex.quote(module)}")
