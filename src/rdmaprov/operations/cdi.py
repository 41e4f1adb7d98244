"""The CDI spec of a node's RDMA devices: made on the node by its own script, from sysfs."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.files import ManagedFile
from rdmaprov.facts.rdma import CdiSpecCurrent
from rdmaprov.operations.files import file_commands
from rdmaprov.quoting import sh


@operation()
def cdi_spec(script: str, spec: str, wanted: bool):
    """`spec` as `script` makes it from the devices the node has now (wanted), or absent. The
    same script is what udev runs when a device comes or goes, so apply and udev never disagree
    on its text; a spec the devices no longer match (renumbered where udev did not run it) is
    drift, made again by the next apply."""
    if not wanted:
        yield from file_commands(spec, fact(ManagedFile, path=spec), None, "644", "root", "root", None)
    elif fact(CdiSpecCurrent, script=script):
        host.noop(f"{spec} lists the RDMA devices the node has")
    else:
        yield StringCommand(sh(script))
