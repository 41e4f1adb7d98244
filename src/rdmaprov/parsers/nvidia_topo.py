"""`nvidia-smi topo -m`: how far each GPU sits from each NIC, to test each rail through the GPU
that NCCL would use with it (GPUDirect RDMA).

The matrix has one column per GPU and NIC, then `CPU Affinity`, `NUMA Affinity` (and on newer
drivers `GPU NUMA ID`). Newer drivers name the NICs `NIC0…` and map them to RDMA devices in a
`NIC Legend:` block; older ones head the columns with the device names (`mlx5_0`). nvidia-smi
separates cells with tabs and underlines the header with ANSI escapes on a terminal; copies
pasted from a terminal have spaces instead. Cells are read by position among the device columns,
so either works.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
# The words that start the affinity columns, after the last device column.
_AFFINITY = ("CPU", "NUMA")

# nvidia-smi's connection kinds between a GPU and a NIC, nearest first (its legend).
PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class GpuTopology:
    gpus: tuple[int, ...]  # nvidia-smi's GPU indexes
    nics: tuple[str, ...]  # RDMA device names
    paths: Mapping[int, Mapping[str, str]]  # GPU index → device → PIX, PXB, PHB, NODE or SYS

    def path(self, gpu: int, nic: str) -> str | None:
        return self.paths.get(gpu, {}).get(nic)


def parse_topo_matrix(text: str) -> GpuTopology | None:
    """The GPU-to-NIC paths of `nvidia-smi topo -m`; None when there is no matrix (no GPU, no
    nvidia-smi)."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if start is None:
        return None
    header = lines[start].split()
    end = next((i for i, word in enumerate(header) if word in _AFFINITY), len(header))
    columns = header[:end]
    legend = {m.group(1): m.group(2) for m in map(_LEGEND.match, lines[start:]) if m}
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        words = line.split()
        if words and words[0] in columns and len(words) > len(columns):
            rows[words[0]] = words[1 : 1 + len(columns)]
    gpus = {label: int(m.group(1)) for label in columns if (m := _GPU.match(label))}
    nics = {label: legend.get(label, label) for label in columns if label not in gpus}
    paths = {
        gpu: {
            nics[label]: cells[index] for index, label in enumerate(columns) if label in nics and cells[index] in PATHS
        }
        for gpu_label, gpu in gpus.items()
        if (cells := rows.get(gpu_label))
    }
    return GpuTopology(tuple(gpus.values()), tuple(nics.values()), paths)
