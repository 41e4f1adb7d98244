"""Facts about a node's NVIDIA GPUs and driver."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

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
    """The NVIDIA kernel module's version on disk (installed) and in the running kernel (loaded)."""

    installed: str = ""
    loaded: str = ""


def parse_driver_state(lines: list[str]) -> DriverState:
    """`installed VERSION` / `loaded VERSION` lines (empty version: none)."""
    values = {}
    for line in lines:
        tag, _, rest = line.strip().partition(" ")
        values[tag] = rest.strip()
    return DriverState(values.get("installed", ""), values.get("loaded", ""))


class NvidiaDriver(FactBase[DriverState]):
    def command(self) -> str:
        return (
            'echo "installed $(modinfo -F version nvidia 2>/dev/null)"; '
            'echo "loaded $(cat /sys/module/nvidia/version 2>/dev/null)"'
        )

    def process(self, output: list[str]) -> DriverState:
        return parse_driver_state(output)

    @staticmethod
    def default() -> DriverState:
        return DriverState()
