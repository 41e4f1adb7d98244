"""Facts about a node's NVIDIA GPUs and driver."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from rdmaprov.facts.node_report import FABRIC_MANAGER, NVSWITCHES
from rdmaprov.nvidia import flavor_of_license
from rdmaprov.parsers.fabric import FabricManagerState, parse_fabric_manager, parse_nvswitches
from rdmaprov.parsers.node import Gpu, parse_gpus


class Gpus(FactBase[list[Gpu]]):
    """The GPUs nvidia-smi sees (none where there is no driver or no GPU)."""

    def command(self) -> str:
        return "nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null || true"

    def process(self, output: list[str]) -> list[Gpu]:
        return parse_gpus(output)

    @staticmethod
    def default() -> list[Gpu]:
        return []


@dataclass(frozen=True)
class DriverState:
    """The NVIDIA kernel module's version on disk (installed) and in the running kernel (loaded),
    and which modules those are on disk: open or proprietary ("" where none is installed)."""

    installed: str = ""
    loaded: str = ""
    flavor: str = ""


def parse_driver_state(lines: list[str]) -> DriverState:
    """`installed VERSION` / `loaded VERSION` / `license TEXT` lines (empty: none)."""
    values = {}
    for line in lines:
        tag, _, rest = line.strip().partition(" ")
        values[tag] = rest.strip()
    return DriverState(
        values.get("installed", ""), values.get("loaded", ""), flavor_of_license(values.get("license", ""))
    )


class NvidiaDriver(FactBase[DriverState]):
    def command(self) -> str:
        return (
            'echo "installed $(modinfo -F version nvidia 2>/dev/null)"; '
            'echo "loaded $(cat /sys/module/nvidia/version 2>/dev/null)"; '
            'echo "license $(modinfo -F license nvidia 2>/dev/null)"'
        )

    def process(self, output: list[str]) -> DriverState:
        return parse_driver_state(output)

    @staticmethod
    def default() -> DriverState:
        return DriverState()


class NvSwitches(FactBase[tuple[str, ...]]):
    """PCI addresses of the NVSwitches on the node's bus (none on PCIe-GPU and GPU-less nodes)."""

    def command(self) -> str:
        return NVSWITCHES

    def process(self, output: list[str]) -> tuple[str, ...]:
        return parse_nvswitches(output)

    @staticmethod
    def default() -> tuple[str, ...]:
        return ()


class FabricManager(FactBase[FabricManagerState]):
    """The installed fabric manager's version and its service's state."""

    def command(self) -> str:
        return FABRIC_MANAGER

    def process(self, output: list[str]) -> FabricManagerState:
        return parse_fabric_manager(output)

    @staticmethod
    def default() -> FabricManagerState:
        return FabricManagerState()


class PeerMemoryApi(FactBase[bool]):
    """Whether the running kernel's RDMA stack exports the peer-memory API nvidia-peermem is built
    on (`ib_register_peer_memory_client`: MLNX_OFED, DOCA, some distro kernels)."""

    def command(self) -> str:
        return "grep -q ' ib_register_peer_memory_client' /proc/kallsyms 2>/dev/null && echo yes || echo no"

    def process(self, output: list[str]) -> bool:
        return [line.strip() for line in output] == ["yes"]

    @staticmethod
    def default() -> bool:
        return False
