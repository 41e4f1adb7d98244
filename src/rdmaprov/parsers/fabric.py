"""NVSwitch systems: the NVSwitches on a node's PCI bus and the fabric manager that must run there.

On an HGX/DGX board CUDA does not start until NVIDIA's fabric manager has set up the NVSwitch
fabric, and the fabric manager refuses to start unless its version is the driver's, exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b")
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@dataclass(frozen=True)
class FabricManagerState:
    """What the node says of its fabric manager: the version its binary reports ("" where it is
    not installed) and systemd's word for its service (active, inactive, failed; "" unknown)."""

    version: str = ""
    service: str = ""


def parse_fabric_manager(lines: list[str]) -> FabricManagerState:
    """`nv-fabricmanager --version` ("Fabric Manager version is : 535.129.03") followed by a line
    `service WORD` (systemctl is-active)."""
    version, service = "", ""
    for line in lines:
        tag, _, rest = line.strip().partition(" ")
        if tag == "service":
            service = rest.strip()
        elif "version" in line.lower() and (match := _VERSION.search(line)):
            version = match.group(1)
    return FabricManagerState(version, service)


def parse_nvswitches(lines: list[str]) -> tuple[str, ...]:
    """PCI addresses, one a line, of the node's NVSwitches (anything else on a line is ignored)."""
    return tuple(line.strip() for line in lines if _PCI_ADDRESS.match(line.strip()))
