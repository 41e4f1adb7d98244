"""GPUDirect readiness from the node report: ACS on the PCIe switches above GPUs and HCAs, the IOMMU,
and each GPU's nearest HCA, judged on real lspci, nvidia-smi and topology captures."""

from __future__ import annotations

from rdmaprov.health.checks import verify_node
from rdmaprov.parsers.node import parse_node_report
from rdmaprov.parsers.pci_places import parse_pci_places, pci_address
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host

PUBLIC = FIXTURES / "public"
# the N1SDP's PLX PEX 8749: root port 00:00.0, upstream 01:00.0, downstream 02:08.0 (ReqRedir+ on)
PLX = (PUBLIC / "lspci_vvxxx_D_N1SDP_plx_pex8749_downstream_acsctl_reqredir_on.txt").read_text()
ROOT_PORT_OFF = (PUBLIC / "lspci_vvnn_sunrise_point_lp_root_port_acsctl_all_off_iwlwifi.txt").read_text()
NON_ROOT = (PUBLIC / "lspci_vvvvv_nonroot_dell_haswell_capabilities_access_denied_abridged.txt").read_text()
A100X4 = (PUBLIC / "nvidia-smi_q_A100x4_555_remapped_rows_pending_correctable_353.txt").read_text()
TOPO_4X4 = (PUBLIC / "nvidia-smi_topo_m_4gpu_4nic_old_device_columns_tabs_traverse.txt").read_text()


def _findings(
    places: list[str], lspci: str, check: str, topo: str = "", hcas=("mlx5_0",), storage=(), fabric="infiniband"
) -> list:
    text = "\n".join(["@@ nvidia_smi_q", A100X4, "@@ gpu_topology", topo, "@@ pci_places", *places, "@@ acs", lspci])
    spec = lab_host(fabric=fabric, rdma={"devices": list(hcas), "storage_hcas": list(storage)}, gpu={"count": 4})
    return [f for f in verify_node(spec, parse_node_report(text)) if f.id == check]


UNDER_PLX = [
    "gpu 0000:68:00.0 /sys/devices/pci0000:00/0000:00:00.0/0000:01:00.0/0000:02:08.0/0000:68:00.0 0 -",
    "hca mlx5_0 /sys/devices/pci0000:00/0000:00:00.0/0000:01:00.0/0000:02:10.0/0000:69:00.0 0 -",
]


def test_pci_places_read_the_bridges_numa_and_iommu_type():
    [gpu, hca] = parse_pci_places([*UNDER_PLX, "hca rxe0", "gpu 0000:9e:00.0 /sys/devices/virtual/x -1 -"])
    assert gpu.address == "0000:68:00.0" and gpu.bridges == ("0000:00:00.0", "0000:01:00.0", "0000:02:08.0")
    assert gpu.numa == 0 and gpu.iommu == "" and hca.name == "mlx5_0"
    [none] = parse_pci_places(["gpu 0000:9e:00.0 /sys/devices/pci0000:9d/0000:9d:00.0/0000:9e:00.0 -1 DMA-FQ"])
    assert none.numa is None and none.iommu == "DMA-FQ"
    assert pci_address("00000000:9E:00.0") == "0000:9e:00.0"


def test_a_switch_port_with_acs_redirect_above_a_gpu_is_named_with_how_to_clear_it():
    found = _findings(UNDER_PLX, PLX, "gpu.acs")
    assert [(f.subject, f.ok, f.found) for f in found] == [
        ("bridge 0000:02:08.0", False, "SrcValid+ ReqRedir+ CmpltRedir+"),
        ("bridge 0000:02:10.0", False, "SrcValid+ ReqRedir+ CmpltRedir+"),
    ]
    assert "`setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000`" in found[0].hint


def test_root_ports_are_not_judged_and_without_a_switch_acs_is_not_applicable():
    """The Sunrise Point root port (ACS all off) is a root port: traffic between root ports
    crosses the root complex whatever ACS says, so no switch port is judged. A VM's flat bus (the
    lent H100: the GPU at 00:06.0, no bridge at all, lspci's bridge list empty) is the same case."""
    places = ["gpu 0000:68:00.0 /sys/devices/pci0000:00/0000:00:1c.0/0000:68:00.0 0 -"]
    flat = ["gpu 0000:00:06.0 /sys/devices/pci0000:00/0000:00:06.0 -1 -"]
    for where, lspci in ((places, ROOT_PORT_OFF), (flat, ""), (flat, ROOT_PORT_OFF)):
        [found] = _findings(where, lspci, "gpu.acs")
        assert found.ok and found.found == "not applicable: no PCIe switch above the GPUs and HCAs"


def test_lspci_without_root_is_unknown_and_says_to_run_it_as_root():
    """A GPU under the Dell's root port 00:01.0 and its bridge 00:02.0, whose ACS lspci hid."""
    places = ["gpu 0000:03:00.0 /sys/devices/pci0000:00/0000:00:01.0/0000:00:02.0/0000:03:00.0 0 -"]
    [found] = _findings(places, NON_ROOT, "gpu.acs")
    assert found.unknown and "run it as root" in found.found and "pciutils" in found.found
    # bridges hidden elsewhere do not decide; switch ports lspci does not show at all are unknown
    [found] = _findings(UNDER_PLX, NON_ROOT, "gpu.acs")
    assert found.unknown and found.found == "unknown: lspci shows none of the 3 switch ports above the GPUs and HCAs"


def test_an_iommu_that_translates_gpu_or_hca_dma_fails_passthrough_passes():
    translated = [line.replace(" 0 -", " 0 DMA") for line in UNDER_PLX]
    [found] = _findings(translated, PLX, "gpu.iommu")
    assert not found.ok and found.found == "GPU 0000:68:00.0 (DMA), mlx5_0 (DMA)" and "iommu=pt" in found.hint
    passthrough = [line.replace(" 0 -", " 0 identity") for line in UNDER_PLX]
    [found] = _findings(passthrough, PLX, "gpu.iommu")
    assert found.ok and found.found == "passthrough"


def test_gpus_whose_nearest_compute_hca_is_across_the_sockets_are_named():
    """The 4-GPU node of the capture: mlx5_0/1 on GPU0/1's socket, mlx5_2/3 on GPU2/3's. With
    mlx5_2 and mlx5_3 kept for storage, GPU2 and GPU3 reach the fabric only across the sockets."""
    hcas = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    places = [f"gpu 0000:{b}:00.0 /sys/devices/pci0000:{b}/0000:{b}:00.0 0 -" for b in ("68", "9e", "c2", "d4")]
    every = _findings(places, PLX, "gpu.hca_affinity", TOPO_4X4, hcas)
    assert [(f.subject, f.ok, f.found) for f in every] == [
        ("gpu0 00000000:68:00.0", True, "mlx5_0 at NODE"),
        ("gpu1 00000000:9E:00.0", True, "mlx5_0 at NODE"),
        ("gpu2 00000000:C2:00.0", True, "mlx5_2 at NODE"),
        ("gpu3 00000000:D4:00.0", True, "mlx5_2 at NODE"),
    ]
    storage = _findings(places, PLX, "gpu.hca_affinity", TOPO_4X4, hcas, storage=("mlx5_2", "mlx5_3"))
    assert [(f.subject, f.ok, f.found) for f in storage if not f.ok] == [
        ("gpu2 00000000:C2:00.0", False, "mlx5_0 at SYS"),
        ("gpu3 00000000:D4:00.0", False, "mlx5_0 at SYS"),
    ]
    assert "across the CPU interconnect" in storage[2].hint


def test_a_gpu_and_its_nearest_hca_on_different_numa_nodes_fail_and_without_topology_is_unknown():
    places = [
        "gpu 0000:68:00.0 /sys/devices/pci0000:68/0000:68:00.0 0 -",
        "hca mlx5_0 /sys/devices/pci0000:69/0000:69:00.0 1 -",
    ]
    hcas = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    gpu0 = _findings(places, PLX, "gpu.hca_affinity", TOPO_4X4, hcas)[0]
    assert not gpu0.ok and gpu0.found == "mlx5_0 at NODE, NUMA 1 (GPU on 0)"
    unknown = _findings(places, PLX, "gpu.hca_affinity", "", hcas)
    assert all(f.unknown for f in unknown) and len(unknown) == 4


def test_nodes_that_report_no_gpu_place_get_no_platform_checks():
    """Drivers gone or no nvidia-smi: no places, nothing judged (the GPU count check says why)."""
    assert _findings([], "", "gpu.acs") == [] and _findings([], "", "gpu.iommu") == []


def test_gpu_nodes_on_fabrics_without_gpudirect_get_no_platform_checks():
    """SoftRoCE and eRDMA move GPU data through host memory whatever the platform: an IOMMU that
    translates (AMD's default) is no fault there."""
    translated = [line.replace(" 0 -", " 0 DMA") for line in UNDER_PLX]
    for fabric in ("softroce", "erdma"):
        assert _findings(translated, PLX, "gpu.iommu", fabric=fabric) == []
    assert _findings(translated, PLX, "gpu.iommu", fabric="roce")
