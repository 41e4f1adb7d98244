"""What GPUDirect RDMA needs from the platform of a GPU node, judged from the node report: the PCIe
switches between GPUs and HCAs let peer traffic through (ACS), no IOMMU translates it, and each
GPU has an HCA near it rather than across the CPU interconnect.

Each of these fails silently on a real cluster: NCCL still runs, through host memory or up
through the root complex, at a fraction of the fabric's speed, or hangs.
"""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.parsers.node import NodeReport
from rdmaprov.parsers.nvidia_topo import PATHS
from rdmaprov.parsers.pci_places import PciPlace, pci_address

# IOMMU domain types under which a device's DMA goes to memory untranslated.
_UNTRANSLATED = ("", "identity")


def check_gpudirect(c: Checker, report: NodeReport, hcas: list[str]) -> None:
    """The three platform checks on a GPU node whose report says where its devices sit; `hcas`:
    the compute HCAs (storage HCAs carry no training traffic)."""
    places = [p for p in report.pci_places if p.kind == "gpu" or p.name in hcas]
    if not any(p.kind == "gpu" for p in places):
        return
    _check_acs(c, report, places)
    _check_iommu(c, places)
    _check_affinity(c, report, places, hcas)


def _check_acs(c: Checker, report: NodeReport, places: list[PciPlace]) -> None:
    """Every PCIe switch port above a GPU or a compute HCA lets peer traffic pass (root ports are
    left out: traffic between root ports crosses the root complex whatever ACS says)."""
    expected = "ACS redirect off on the switch ports above GPUs and HCAs"
    on_paths = {bridge for place in places for bridge in place.bridges[1:]}
    if not on_paths:  # e.g. a VM's flat bus: nothing between the devices and the root complex
        c.not_applicable("PCIe switches", "gpu.acs", expected, "no PCIe switch above the GPUs and HCAs")
        return
    acs = report.acs
    # bridges whose ACS lspci could not show (no root) matter only on the GPUs' and HCAs' paths
    unreadable = acs.unjudged() if acs else []
    if acs is None or (acs.unknown is not None and (not unreadable or {d.address for d in unreadable} & on_paths)):
        why = acs.unknown if acs else "no lspci output"
        c.unknown("PCIe switches", "gpu.acs", expected, f"{why} (lspci, from pciutils, as root)")
        return
    listed = on_paths & {d.address for d in acs.bridges() if not d.acs_unreadable}
    if not listed:
        why = f"lspci shows none of the {len(on_paths)} switch ports above the GPUs and HCAs"
        c.unknown("PCIe switches", "gpu.acs", expected, why)
        return
    redirecting = [d for d in acs.redirecting() if d.address in on_paths]
    for bridge in redirecting:
        c.check(
            f"bridge {bridge.address}",
            "gpu.acs",
            False,
            "ACS redirect off",
            " ".join(f"{flag}+" for flag in bridge.redirect_flags),
            "peer traffic between the GPUs and HCAs under this switch port is sent up through the CPU: "
            f"`setpci -s {bridge.address} ECAP_ACS+0x6.w=0000` clears it until the next boot; turn ACS off in "
            "the BIOS (or the switch's configuration) for good",
        )
    if not redirecting:
        c.check("PCIe switches", "gpu.acs", True, expected, f"off on {len(listed)} switch ports")


def _check_iommu(c: Checker, places: list[PciPlace]) -> None:
    translated = [p for p in places if p.iommu not in _UNTRANSLATED]
    names = [f"{p.name} ({p.iommu})" if p.kind == "hca" else f"GPU {p.address} ({p.iommu})" for p in translated]
    c.check(
        "IOMMU",
        "gpu.iommu",
        not translated,
        "off or passthrough for GPUs and HCAs",
        ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")
        or ("passthrough" if any(p.iommu == "identity" for p in places) else "off"),
        "the IOMMU translates the devices' DMA, so GPUDirect RDMA's peer traffic is redirected or refused: "
        "boot with `iommu=pt` (passthrough), or turn the IOMMU off, on the kernel command line",
    )


def _check_affinity(c: Checker, report: NodeReport, places: list[PciPlace], hcas: list[str]) -> None:
    """Each GPU's nearest compute HCA (nvidia-smi topo -m) on its own side of the CPU
    interconnect: a GPU whose nearest HCA is SYS, or on another NUMA node, sends every byte
    across the sockets."""
    topology = report.gpu_topology
    numa = {p.name: p.numa for p in places}  # a GPU's name is its PCI address
    expected = "an HCA on the same side of the CPU interconnect"
    for index, health in enumerate(report.gpu_health):
        subject = f"gpu{index} {health.bus_id}"
        if not hcas:  # nothing for GPUDirect to reach (a node without any HCA fails the RDMA device check)
            c.not_applicable(subject, "gpu.hca_affinity", expected, "no compute HCA on this node")
            continue
        paths = {h: path for h in hcas if topology and (path := topology.path(index, h))}
        if not paths:
            c.unknown(subject, "gpu.hca_affinity", expected, "nvidia-smi topo -m names no compute HCA for it")
            continue
        hca = min(paths, key=lambda h: PATHS.index(paths[h]))
        here, there = numa.get(pci_address(health.bus_id)), numa.get(hca)
        apart = here is not None and there is not None and here != there
        c.check(
            subject,
            "gpu.hca_affinity",
            paths[hca] != "SYS" and not apart,
            expected,
            f"{hca} at {paths[hca]}" + (f", NUMA {there} (GPU on {here})" if apart else ""),
            "the GPU's nearest HCA is across the CPU interconnect: its traffic crosses the sockets; check which "
            "slots the GPUs and HCAs sit in (`nvidia-smi topo -m`) and the BIOS's PCIe settings",
        )
