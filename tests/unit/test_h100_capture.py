"""verify's judgement of a real GPU node: the node report and torchrun log that rdmaprov captured on
a lent H100 (one SXM5 GPU passed into a VM, no NVSwitch, no RDMA device, no DCGM, PyTorch with its
own NCCL; tests/fixtures/gpu-h100/README.md). What such a node lacks by its nature reads "not
applicable"; what it lacks against the inventory fails or is unknown with the reason."""

from __future__ import annotations

import io

from rich.console import Console

from rdmaprov.facts.node_report import node_report_command
from rdmaprov.health.checks import verify_node
from rdmaprov.health.gates.all_reduce import nccl_transport, transport_verdict
from rdmaprov.health.gates.bandwidth import Verdict
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.health.report import print_facts, print_gates
from rdmaprov.parsers.node import NodeReport, parse_node_report
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host

H100 = FIXTURES / "gpu-h100"
REPORT = parse_node_report((H100 / "node_report_h100_vm_torch_no_rdma.txt").read_text())
TORCHRUN = (H100 / "torchrun_1gpu_torch2.11_nccl2.28.9_info_socket.txt").read_text()
TORCH = "/opt/torch/.venv/bin/python3"
# the inventory rdmaprov ran with on that machine
SPEC = lab_host(
    "h100",
    fabric="roce",
    netns_mode=None,
    rdma={"devices": []},
    gpu={"count": 1, "model": "H100 80GB HBM3", "driver_version": "580.159.04", "cuda_version": "13.0"},
    nccl={"version": "2.28.3-1", "frameworks": [TORCH]},
)


def _by_check() -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in verify_node(SPEC, REPORT):
        found.setdefault(finding.id, []).append(finding)
    return found


def test_what_a_single_gpu_vm_lacks_by_its_nature_is_not_applicable():
    found = _by_check()
    [fabric] = found["gpu.fabric_manager"]
    [acs] = found["gpu.acs"]
    [affinity] = found["gpu.hca_affinity"]
    assert fabric.ok and fabric.found == "not applicable: no NVSwitch on this node's PCI bus"
    assert acs.ok and acs.found == "not applicable: no PCIe switch above the GPUs and HCAs"
    assert affinity.ok and affinity.found == "not applicable: no compute HCA on this node"
    assert affinity.subject == "gpu0 00000000:00:06.0"
    [iommu] = found["gpu.iommu"]
    assert iommu.ok and iommu.found == "off"


def test_the_gpu_itself_passes_every_health_check():
    found = _by_check()
    gpu = [f for f in verify_node(SPEC, REPORT) if f.subject == "gpu0 00000000:00:06.0" and not f.unknown]
    assert len(gpu) >= 6 and all(f.ok for f in gpu), [(f.check, f.found) for f in gpu if not f.ok]
    assert [(f.ok, f.found) for f in found["gpu.driver_version"]] == [(True, "580.159.04")]
    assert all(f.ok for f in found["gpu.xid"])


def test_what_it_lacks_against_the_inventory_fails_or_is_unknown_with_why():
    found = _by_check()
    [dcgm] = found["gpu.dcgm_diag"]
    assert dcgm.unknown and dcgm.found == "unknown: dcgmi is not installed (NVIDIA DCGM)"
    [framework] = found["nccl.framework"]
    assert not framework.ok and framework.subject == TORCH
    assert framework.found.startswith("PyTorch 2.11.0+cu130 loads NCCL 2.28.9")
    assert "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2" in framework.found
    assert "declare NCCL 2.28.9 (nccl.version)" in framework.hint
    failed = {f.id for f in verify_node(SPEC, REPORT) if not f.ok and not f.unknown}
    # no RDMA device, and what `apply` would have put there: nccl.conf, the declared NCCL, nccl-tests
    assert failed == {"rdma.devices", "nccl.conf_present", "nccl.library", "nccl.tests_library", "nccl.framework"}


def test_torchrun_s_socket_fallback_names_the_inventory_host_and_its_rank():
    """NCCL named the node `vm` (its host name, from `uname -n` there); the verdict names `h100`."""
    reports = {"h100": parse_node_report("@@ hostname\nvm\n")}
    assert reports["h100"].hostname == "vm" and "@@ hostname" in node_report_command()
    transport = nccl_transport(TORCHRUN, ["h100"], reports)
    assert transport.socket_hosts() == ["h100"] and transport.no_ib_device == {"h100"}
    verdict = transport_verdict(transport, set(), Verdict("pass", 10995.4, 1.0, "GB/s", "10995.4 GB/s"))
    assert verdict.reason == "NCCL used TCP sockets, not RDMA, on h100 [rank 0] (NET/IB: no device found): 10995.4 GB/s"
    # a host name two nodes share (cloned images) cannot say which: both are named
    shared = nccl_transport(TORCHRUN, ["a", "b"], {"a": NodeReport(hostname="vm"), "b": NodeReport(hostname="vm.x")})
    assert shared.socket_hosts() == ["vm (host name of a, b)"]


def test_the_facts_table_puts_a_node_without_rdma_devices_in_its_columns():
    """The H100's row: no RDMA device, its memlock under memlock (one cell short, it slid left)."""
    out = io.StringIO()
    print_facts({"h100": REPORT}, {}, Console(file=out, width=300))
    header = next(line for line in out.getvalue().splitlines() if "memlock" in line)
    row = next(line for line in out.getvalue().splitlines() if "no RDMA devices" in line)
    assert row.index("unlimited") == header.index("memlock")


def test_the_gates_table_shows_brackets_a_reason_quotes():
    """rich took `[rank 0]` for markup and dropped it from the table on the H100 run."""
    out = io.StringIO()
    reason = "NCCL used TCP sockets, not RDMA, on h100 [rank 0] (NET/IB: no device found)"
    print_gates([GateResult("workload", Subject.parse("h100 [x]"), False, reason)], Console(file=out, width=300))
    assert "h100 [rank 0] (NET/IB" in out.getvalue() and "h100 [x]" in out.getvalue()
