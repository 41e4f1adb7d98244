"""Fleet consistency: what one node has that the rest of the fleet does not. Version skew across
nodes (a GPU driver, the NCCL programs load, an HCA's firmware) is what users of cluster health
tools report most: each node passes alone, and jobs across them hang or slow down.

Pure: reads the node reports verify already has, no extra round trip. The majority value is
the expectation; a tie goes to the value the most hosts share, then the higher version.

What every rank of a job must share (GPU driver, CUDA, NCCL, HCA firmware) is compared across
all the nodes; what comes with the distro (kernel, rdma-core) only among nodes of the same
release, so a cluster upgraded one release at a time is not a fleet of odd nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from rdmaprov.health.findings import Finding, finding
from rdmaprov.inventory.model import HostSpec
from rdmaprov.parsers.node import NodeReport, nccl_library_version


def _driver(report: NodeReport) -> dict[str, str]:
    return {"GPU driver": report.gpus[0].driver_version} if report.gpus else {}


def _nccl(report: NodeReport) -> dict[str, str]:
    version = nccl_library_version(report.nccl_linked[0][1]) if report.nccl_linked else None
    return {"NCCL programs load": version} if version else {}


def _firmware(report: NodeReport) -> dict[str, str]:
    return {
        f"HCA firmware (part {d.vendor_part_id})": d.fw_ver
        for d in report.devices
        if d.vendor_part_id and d.fw_ver and d.transport != "iWARP"
    }


def _cuda(report: NodeReport) -> dict[str, str]:
    return {"CUDA toolkits": ", ".join(report.cuda_toolkits)} if report.gpus and report.cuda_toolkits else {}


def _on_release(report: NodeReport, what: str) -> str:
    return f"{what} on {report.release}" if report.release else what


def _kernel(report: NodeReport) -> dict[str, str]:
    return {_on_release(report, "kernel"): report.kernel} if report.kernel else {}


def _rdma_core(report: NodeReport) -> dict[str, str]:
    return {_on_release(report, "rdma-core"): report.rdma_core} if report.rdma_core else {}


# check id → what the node reports for it (subject → value)
_FACTS: dict[str, Callable[[NodeReport], dict[str, str]]] = {
    "fleet.kernel": _kernel,
    "fleet.rdma_core": _rdma_core,
    "fleet.gpu_driver": _driver,
    "fleet.cuda": _cuda,
    "fleet.nccl_version": _nccl,
    "fleet.hca_firmware": _firmware,
}
_HINTS = {
    "fleet.kernel": "boot every node into one kernel (a node that missed a reboot after an upgrade runs the old one)",
    "fleet.rdma_core": "install one rdma-core version everywhere: pin it in packages.rdma and run `rdmaprov apply`",
    "fleet.gpu_driver": "bring every node to one driver: declare gpu.driver_version and run `rdmaprov apply "
    "--allow-reboot` (or drain the odd node)",
    "fleet.cuda": "install the same CUDA toolkits everywhere: declare gpu.cuda_version and run `rdmaprov apply`; "
    "remove toolkits the cluster no longer uses",
    "fleet.nccl_version": "every rank must load the same NCCL: run `rdmaprov apply` on the odd node and check "
    "what else provides libnccl.so.2 there",
    "fleet.hca_firmware": "update the odd HCAs' firmware (mlxfwreset/mstflint, or the vendor's tool) to match "
    "the fleet",
}


def _version_key(value: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in value.replace("-", ".").split("."))


def fleet_findings(hosts: Mapping[str, HostSpec], reports: dict[str, NodeReport]) -> dict[str, list[Finding]]:
    """For each host, a finding per fact that two or more hosts report: ok when it has the value
    most hosts have, failed (naming that value and how many have it) when not."""
    found: dict[str, list[Finding]] = {name: [] for name in reports}
    for check_id, read in _FACTS.items():
        by_subject: dict[str, dict[str, str]] = {}
        for name, report in reports.items():
            for subject, value in read(report).items():
                by_subject.setdefault(subject, {})[name] = value
        for subject, values in by_subject.items():
            if len(values) < 2:
                continue
            counts = Counter(values.values())
            usual = max(counts, key=lambda v: (counts[v], _version_key(v)))
            for name, value in values.items():
                found[name].append(
                    finding(
                        name,
                        hosts[name].node.fabric,
                        check_id,
                        subject,
                        value == usual,
                        f"{usual} (as on {counts[usual]} of {len(values)} nodes"
                        + ("; no majority, so the newest counts" if counts[usual] * 2 <= len(values) else "")
                        + ")",
                        value,
                        _HINTS[check_id],
                    )
                )
    return found
