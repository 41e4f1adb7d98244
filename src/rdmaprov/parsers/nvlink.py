"""NVLink state of each GPU from `nvidia-smi nvlink --status`: a link that went inactive leaves
the GPU working, but every collective inside the node then crawls through fewer links (or PCIe).

The output is a `GPU N: NAME (UUID: …)` line per GPU, then a `Link K: 25.781 GB/s` or
`Link K: <inactive>` line per link; a GPU without NVLink prints its GPU line only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$")
_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")


@dataclass(frozen=True)
class GpuLinks:
    index: int
    name: str
    active: tuple[int, ...]
    inactive: tuple[int, ...]


def parse_nvlink_status(text: str) -> list[GpuLinks]:
    """One entry per GPU in nvidia-smi's order, with its active and inactive link numbers."""
    gpus: list[tuple[int, str, list[int], list[int]]] = []
    for line in text.splitlines():
        gpu = _GPU.match(line)
        if gpu:
            gpus.append((int(gpu.group(1)), gpu.group(2), [], []))
            continue
        link = _LINK.match(line)
        if link and gpus:
            active, inactive = gpus[-1][2], gpus[-1][3]
            (inactive if "inactive" in link.group(2).lower() else active).append(int(link.group(1)))
    return [GpuLinks(index, name, tuple(a), tuple(i)) for index, name, a, i in gpus]
