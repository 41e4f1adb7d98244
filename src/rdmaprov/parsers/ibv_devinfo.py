"""`ibv_devinfo -v` → devices, ports and GID tables (real outputs: irdma RoCE, rxe; see tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Gid:
    index: int
    gid: str
    type: str  # "RoCE v2", "RoCE v1", "IB" or "" when ibv_devinfo does not say


@dataclass
class Port:
    number: int
    state: str = ""  # PORT_ACTIVE, PORT_DOWN...
    phys_state: str = ""  # LINK_UP, DISABLED...
    link_layer: str = ""  # InfiniBand or Ethernet
    max_mtu: int = 0
    active_mtu: int = 0
    active_width: str = ""
    active_speed: str = ""
    gids: list[Gid] = field(default_factory=list)


@dataclass
class Device:
    hca: str
    transport: str = ""
    fw_ver: str = ""
    node_guid: str = ""
    vendor_part_id: str = ""  # the HCA model (4125: ConnectX-6 Dx): firmware is compared within one
    ports: list[Port] = field(default_factory=list)


_KV = re.compile(r"^\s*([A-Za-z_ ]+?):\s*(.*?)\s*$")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)(?:,\s*(.+?))?\s*$")


def _first_word(value: str) -> str:
    return value.split()[0] if value.split() else ""


def _mtu(value: str) -> int:
    word = _first_word(value)
    return int(word) if word.isdigit() else 0


def parse_ibv_devinfo(text: str) -> list[Device]:
    """Every `hca_id:` block; port fields keep their symbolic part (`PORT_ACTIVE`, not `(4)`)."""
    devices: list[Device] = []
    device: Device | None = None
    port: Port | None = None
    for line in text.splitlines():
        gid = _GID.match(line)
        if gid and port is not None:
            port.gids.append(Gid(int(gid.group(1)), gid.group(2), gid.group(3) or ""))
            continue
        match = _KV.match(line)
        if not match:
            continue
        key, value = match.group(1).strip(), match.group(2)
        if key == "hca_id":
            device = Device(hca=value)
            devices.append(device)
            port = None
        elif device is None:
            continue
        elif key == "port":
            if not value.strip().isdigit():  # a line cut off mid-way: no port to attach fields to
                port = None
                continue
            port = Port(number=int(value))
            device.ports.append(port)
        elif port is None:
            if key in ("transport", "fw_ver", "node_guid", "vendor_part_id"):
                setattr(device, key, value)
        elif key in ("state", "phys_state"):
            setattr(port, key, _first_word(value))
        elif key == "link_layer":
            port.link_layer = value
        elif key in ("max_mtu", "active_mtu"):
            setattr(port, key, _mtu(value))
        elif key == "active_width":
            port.active_width = _first_word(value)
        elif key == "active_speed":
            port.active_speed = " ".join(value.split()[:2])
    return devices
