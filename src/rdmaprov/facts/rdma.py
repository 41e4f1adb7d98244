"""Facts about RDMA devices, read with the rdma tool and sysfs."""

from __future__ import annotations

from pyinfra.api import FactBase

from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link, parse_rdma_system


class RdmaLinks(FactBase[list[RdmaLink]]):
    """`rdma link show`: empty when the tool or the devices are missing (never a failed host)."""

    def command(self) -> str:
        return "rdma link show 2>/dev/null || true"

    def process(self, output: list[str]) -> list[RdmaLink]:
        return parse_rdma_link("\n".join(output))

    @staticmethod
    def default() -> list[RdmaLink]:
        return []


class RdmaSystem(FactBase[dict[str, str]]):
    """`rdma system show`: {'netns': 'shared'|'exclusive', ...}, empty without the tool."""

    def command(self) -> str:
        return "rdma system show 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_rdma_system("\n".join(output))

    @staticmethod
    def default() -> dict[str, str]:
        return {}
