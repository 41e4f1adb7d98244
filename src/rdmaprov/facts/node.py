"""NodeFacts: everything `facts` and `verify` need about a node, in one command (one round trip).

A missing tool or device leaves its section empty; the fact never fails the host.
"""

from __future__ import annotations

from pyinfra.api import FactBase

from rdmaprov.facts.node_report import node_report_command
from rdmaprov.facts.packed import packed, unpacked
from rdmaprov.parsers.node import NodeReport, parse_node_report


class NodeFacts(FactBase[NodeReport]):
    """`programs`: files whose linkage the checks judge (the nccl-tests binary the gates run);
    `dcgm_level`: DCGM's diagnostic at that level too (0: not); `roce_qos`: RoCE's QoS chain too
    (`qos_firmware`: with the NICs' firmware settings); `frameworks`: which NCCL these Python
    interpreters' PyTorch loads; `enroot`: what enroot gives its containers. The report crosses SSH
    gzipped (facts/packed.py)."""

    def command(
        self,
        programs: tuple[str, ...] = (),
        dcgm_level: int = 0,
        roce_qos: bool = False,
        frameworks: tuple[str, ...] = (),
        qos_firmware: bool = False,
        enroot: bool = False,
    ) -> str:
        return packed(node_report_command(programs, dcgm_level, roce_qos, frameworks, qos_firmware, enroot))

    def process(self, output: list[str]) -> NodeReport:
        return parse_node_report(unpacked(output))

    @staticmethod
    def default() -> NodeReport:
        return NodeReport()
