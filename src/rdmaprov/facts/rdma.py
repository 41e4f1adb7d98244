"""Facts about RDMA devices, read with the rdma tool and sysfs, and about the verbs providers installed."""

from __future__ import annotations

from pyinfra.api import FactBase

from rdmaprov.facts.node_report import roce_qos_command
from rdmaprov.facts.shell import YesNoFact, yes_if
from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link, parse_rdma_system
from rdmaprov.parsers.roce_qos import QosState, parse_qos_state
from rdmaprov.quoting import sh


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


class ErdmaProvider(YesNoFact):
    """Whether libibverbs has the erdma provider (the eRDMA repository's rdma-core)."""

    def command(self) -> str:
        return yes_if(
            "ls /usr/lib*/libibverbs/liberdma-rdmav*.so /usr/lib/*/libibverbs/liberdma-rdmav*.so >/dev/null 2>&1"
        )


class RoceQosState(FactBase[QosState]):
    """RoCE's QoS chain as the node has it: the node report's own reading (one rule for both)."""

    def command(self, firmware: bool = False) -> str:
        return roce_qos_command(firmware)

    def process(self, output: list[str]) -> QosState:
        return parse_qos_state("\n".join(output))

    @staticmethod
    def default() -> QosState:
        return QosState()


class CdiSpecCurrent(YesNoFact):
    """Whether the CDI spec of the RDMA devices is what the node's own script makes from sysfs now
    (no devices and no spec count as current); no where the script is not there yet."""

    def command(self, script: str) -> str:
        return yes_if(f"[ -x {sh(script)} ] && {sh(script)} --check >/dev/null 2>&1")
