"""Which GPU's memory each rail is tested from: NCCL moves a GPU's data through the HCA nearest it
with GPUDirect RDMA, so a rail gate in host memory can pass a rail NCCL cannot use at speed (no
peer-memory module, a PCIe path through the CPU).

NCCL uses GPUDirect only up to PXB (`NCCL_NET_GDR_LEVEL`'s default: at most PCIe switches between
GPU and HCA, never the CPU's host bridge); a rail whose nearest GPU is farther is tested in host
memory, as NCCL would move its data, and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.nvidia_topo import PATHS, GpuTopology

GDR_LEVEL = "PXB"


@dataclass(frozen=True)
class MemoryChoice:
    """The GPU a rail's perftest writes from (None: host memory) and why."""

    gpu: int | None
    why: str


def nearest_gpus(topology: GpuTopology, devices: list[str]) -> dict[str, tuple[int, str]]:
    """{device: (GPU index, path)}: each HCA's nearest GPU, in rail order; among GPUs equally near,
    one no earlier rail took, then the lowest index (two HCAs behind one PCIe switch with two
    GPUs get one GPU each)."""
    taken: dict[int, int] = {}
    chosen: dict[str, tuple[int, str]] = {}
    for device in devices:
        candidates = [
            (PATHS.index(path), taken.get(gpu, 0), gpu, path)
            for gpu in topology.gpus
            if (path := topology.path(gpu, device)) is not None
        ]
        if not candidates:
            continue
        _, _, gpu, path = min(candidates)
        taken[gpu] = taken.get(gpu, 0) + 1
        chosen[device] = (gpu, path)
    return chosen


def memory_plan(report: NodeReport, devices: list[str], mode: str) -> dict[str, MemoryChoice]:
    """For each of a node's rails, the GPU to test it through (GPUDirect) or host memory and why."""
    if mode == "off":
        return {d: MemoryChoice(None, "host memory (gates.rail.gpudirect: off)") for d in devices}
    if not report.gpus:
        return {d: MemoryChoice(None, "host memory (no GPU)") for d in devices}
    topology = report.gpu_topology
    blocker = ""
    if not report.peer_memory:
        blocker = "the peer-memory module is not loaded (modprobe nvidia_peermem)"
    elif not report.perftest_cuda:
        blocker = "this perftest was built without CUDA (ib_write_bw --help has no --use_cuda)"
    elif topology is None:
        blocker = "nvidia-smi topo -m gave no GPU/NIC matrix"
    if blocker or topology is None:
        return {d: MemoryChoice(None, f"host memory: {blocker}") for d in devices}
    nearest = nearest_gpus(topology, devices)
    plan = {}
    for device in devices:
        if device not in nearest:
            plan[device] = MemoryChoice(None, f"host memory: {device} is not in nvidia-smi's topology")
            continue
        gpu, path = nearest[device]
        if PATHS.index(path) > PATHS.index(GDR_LEVEL):
            plan[device] = MemoryChoice(
                None,
                f"host memory: the GPU nearest {device} is GPU{gpu} at {path}, farther than {GDR_LEVEL} "
                "(NCCL would not use GPUDirect RDMA there either)",
            )
        else:
            plan[device] = MemoryChoice(gpu, f"GPU{gpu} memory (GPUDirect RDMA, {path} to {device})")
    return plan
