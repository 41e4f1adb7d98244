"""Where each GPU and each RDMA device sits on the PCI tree, from sysfs: the bridges between it and
the CPU, its NUMA node and how the IOMMU treats its DMA. GPUDirect RDMA moves data straight
between a GPU and an HCA: it is fast only when both sit under one PCIe switch whose ports let peer
traffic through (ACS), with no IOMMU translating it, on the same CPU socket.

Each line is `KIND NAME SYSFS_PATH NUMA IOMMU_TYPE` (`-` where sysfs has no value), e.g.
`gpu 0000:18:00.0 /sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0 0 -`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@dataclass(frozen=True)
class PciPlace:
    kind: str  # gpu or hca
    name: str  # the GPU's PCI address, the RDMA device's name
    address: str  # its PCI address, "0000:18:00.0"
    bridges: tuple[str, ...]  # the PCI bridges above it, the root port first
    numa: int | None  # None: the platform does not say (-1)
    iommu: str  # the IOMMU domain type (DMA, DMA-FQ, identity…); "" without an IOMMU group


def parse_pci_places(lines: list[str]) -> list[PciPlace]:
    """Lines as the node report prints them; malformed ones (a device gone mid-read) are skipped."""
    places = []
    for line in lines:
        words = line.split()
        if len(words) != 5 or words[0] not in ("gpu", "hca"):
            continue
        kind, name, path, numa, iommu = words
        chain = [part for part in path.split("/") if _ADDRESS.match(part)]
        if not chain:
            continue
        places.append(
            PciPlace(
                kind,
                name,
                chain[-1],
                tuple(chain[:-1]),
                int(numa) if re.fullmatch(r"\d+", numa) else None,
                "" if iommu == "-" else iommu,
            )
        )
    return places


def pci_address(nvidia_bus_id: str) -> str:
    """nvidia-smi's bus id (`00000000:18:00.0`) as sysfs and lspci write it (`0000:18:00.0`)."""
    domain, _, rest = nvidia_bus_id.partition(":")
    return f"{domain[-4:].lower()}:{rest.lower()}" if rest else nvidia_bus_id.lower()
