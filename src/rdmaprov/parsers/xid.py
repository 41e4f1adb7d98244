"""NVIDIA Xid events from the kernel log (`dmesg`, journal or syslog lines alike): the driver's
report of a GPU fault, the first thing GPU health tools read.

Newer drivers also report a GPU that fell off the bus in a multi-line message without an Xid
(`NVRM: The NVIDIA GPU 0000:b3:00.0` … `fallen off the bus`); that counts as Xid 79.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+), (.*?)\s*$")
_GPU = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f:.]+)\s*$")


@dataclass(frozen=True)
class Xid:
    bus_id: str
    code: int
    text: str


def parse_xids(lines: list[str]) -> list[Xid]:
    """Every Xid in the order logged; each fallen-off-the-bus message without one as Xid 79."""
    found = []
    for index, line in enumerate(lines):
        xid = _XID.search(line)
        if xid:
            found.append(Xid(xid.group(1), int(xid.group(2)), xid.group(3)))
            continue
        gpu = _GPU.search(line)
        if gpu and any("fallen off the bus" in later for later in lines[index + 1 : index + 3]):
            found.append(Xid(gpu.group(1), 79, "fallen off the bus (reported without an Xid)"))
    return found
