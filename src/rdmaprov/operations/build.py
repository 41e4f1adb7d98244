"""Programs compiled on the node from a source rdmaprov ships: rebuilt only when the source changed."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.files import BuiltFrom


@operation()
def built(binary: str, source: str, build: str | None):
    """Run `build` when `binary` is missing or older than `source`; None: nothing is wanted here."""
    if build is None:
        host.noop("nothing to build")
        return
    if fact(BuiltFrom, binary=binary, source=source):
        host.noop(f"{binary} is up to date")
        return
    yield StringCommand(build)
