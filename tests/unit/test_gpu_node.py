"""The GPU node beside its driver: kernel module flavor, the NVSwitch fabric manager pinned to the
driver, nvidia-persistenced and nvidia-peermem, and what verify reads of the fabric."""

from __future__ import annotations

import pytest

from rdmaprov.deploys.gpu_driver import node_flavor, wants_peer_memory
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.gpu import DriverState, FabricManager, Gpus, NvidiaDriver, NvSwitches, parse_driver_state
from rdmaprov.facts.node_report import node_report_command
from rdmaprov.facts.system import Os
from rdmaprov.health.checks import report_arguments, verify_node
from rdmaprov.nvidia import dcgm_package, flavor_of_license, module_flavor
from rdmaprov.operations.gpu import fabric_manager, fabric_manager_pin, nvidia_driver
from rdmaprov.parsers.fabric import FabricManagerState, parse_fabric_manager, parse_nvswitches
from rdmaprov.parsers.node import Gpu, parse_node_report
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host
from tests.support.ops import APT_INSTALL, FactHost, FactState, commands, os_fact, run_notes

PUBLIC = FIXTURES / "public"
H800 = PUBLIC / "nvidia-smi_q_i0_H800_525_ecc_disabled_ecc_counters_NA_fabric_completed.txt"
H100_PCIE = FIXTURES / "gpu-h100" / "nvidia-smi_q.txt"
APT_DOWNGRADE = APT_INSTALL.replace("install -y -q ", "install -y -q --allow-downgrades ")


# --- kernel module flavor ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "archs", "driver", "flavor"),
    [
        ("auto", ["sm_80"], "535.129.03", "proprietary"),  # before 560: what nodes already run
        ("auto", ["sm_90"], "570", "open"),  # NVIDIA's default from 560
        ("auto", ["sm_100"], "555", "open"),  # Blackwell runs only the open modules
        ("auto", [], "550", "proprietary"),  # no GPU seen yet: the branch decides
        ("auto", ["sm_70"], "570", "proprietary"),  # Volta cannot run the open modules
        ("open", ["sm_80"], "535", "open"),
        ("proprietary", ["sm_90"], "570", "proprietary"),
    ],
)
def test_kernel_modules_by_gpu_generation_and_driver_branch(declared, archs, driver, flavor):
    assert module_flavor(declared, archs, driver) == flavor


@pytest.mark.parametrize(
    ("declared", "archs", "message"),
    [
        ("proprietary", ["sm_100"], "sm_100 GPUs run only NVIDIA's open kernel modules: set gpu.kernel_modules"),
        ("open", ["sm_70"], "sm_70 GPUs cannot run NVIDIA's open kernel modules"),
        ("auto", ["sm_100", "sm_70"], "GPUs of sm_100 and sm_70 cannot share one driver"),
        # no GPU seen yet and no gpu.arch: from 560 a Volta would get modules it cannot run
        ("auto", [], "not known before a driver runs: set gpu.arch"),
    ],
)
def test_a_flavor_the_gpus_cannot_run_is_refused_saying_what_to_set(declared, archs, message):
    with pytest.raises(ValueError, match=message):
        module_flavor(declared, archs, "570")
    assert module_flavor("open", [], "570") == "open"  # declared: the operator knows their GPUs


def test_the_installed_modules_flavor_is_read_from_their_license():
    assert flavor_of_license("Dual MIT/GPL") == "open"
    assert flavor_of_license("NVIDIA") == "proprietary"
    assert flavor_of_license("") == ""
    state = parse_driver_state(["installed 570.133.20", "loaded 570.133.20", "license Dual MIT/GPL"])
    assert state == DriverState("570.133.20", "570.133.20", "open")


@pytest.mark.parametrize(
    ("distro", "driver", "expected"),
    [
        ("ubuntu-22.04", "570", APT_INSTALL + "nvidia-open-570"),
        ("ubuntu-22.04", "570.133.20", APT_INSTALL + "'nvidia-open-570=570.133.20-*'"),
        ("rocky-9.3", "570", "dnf -y module install nvidia-driver:570-open"),
        (
            "rhel-8.9",
            "570.133.20",
            "dnf -y module enable nvidia-driver:570-open && dnf -y install cuda-drivers-570.133.20",
        ),
    ],
)
def test_open_kernel_modules_per_distro(distro, driver, expected):
    assert commands(nvidia_driver, {Os: os_fact(distro)}, version=driver, flavor="open") == [expected]


def test_switching_flavor_on_the_same_driver_reinstalls_it_and_owes_a_reboot():
    proprietary = DriverState("570.133.20", "570.133.20", "proprietary")
    out, notes = run_notes(
        nvidia_driver, {Os: os_fact("rocky-9.3"), NvidiaDriver: proprietary}, version="570", flavor="open"
    )
    assert out == ["dnf -y module reset nvidia-driver && dnf -y module install --allowerasing nvidia-driver:570-open"]
    assert notes.reboots["node1"] == [
        "NVIDIA driver proprietary → open kernel modules: the new kernel module loads at the next boot"
    ]
    same = {Os: os_fact("rocky-9.3"), NvidiaDriver: DriverState("570.133.20", "570.133.20", "open")}
    assert commands(nvidia_driver, same, version="570", flavor="open") == []


# --- fabric manager ------------------------------------------------------------------------


def test_the_fabric_manager_is_pinned_to_the_drivers_exact_version():
    assert fabric_manager_pin("535.129.03", "") == "535.129.03"
    assert fabric_manager_pin("535", "535.129.03") == "535.129.03"  # the branch's driver, installed
    assert fabric_manager_pin("535", "") is None  # no driver yet: both take the branch's newest
    assert fabric_manager_pin("535", "525.147.05") is None  # the driver changes branch in this run


@pytest.mark.parametrize(
    ("distro", "declared", "installed", "expected"),
    [
        (
            "ubuntu-22.04",
            "535.129.03",
            "",
            APT_DOWNGRADE + "'nvidia-fabricmanager-535=535.129.03-*' 'libnvidia-nscq-535=535.129.03-*'",
        ),
        ("ubuntu-22.04", "535", "", APT_DOWNGRADE + "nvidia-fabricmanager-535 libnvidia-nscq-535"),
        (
            "ubuntu-22.04",
            "535",
            "535.129.03",
            APT_DOWNGRADE + "'nvidia-fabricmanager-535=535.129.03-*' 'libnvidia-nscq-535=535.129.03-*'",
        ),
        ("rhel-8.9", "535.129.03", "", "dnf -y install nvidia-fabric-manager-535.129.03 libnvidia-nscq-535-535.129.03"),
        ("rocky-9.3", "550", "", "dnf -y module install nvidia-driver:550-dkms/fm"),
    ],
)
def test_fabric_manager_and_nscq_per_distro_on_an_nvswitch_node(distro, declared, installed, expected):
    facts = {Os: os_fact(distro), NvidiaDriver: DriverState(installed, installed)}
    assert commands(fabric_manager, facts, driver=declared, nvswitch=True) == [expected]


def test_a_fabric_manager_of_another_version_than_the_driver_is_reinstalled_pinned():
    facts = {
        Os: os_fact("ubuntu-22.04"),
        NvidiaDriver: DriverState("535.129.03", "535.129.03"),
        FabricManager: FabricManagerState("535.104.05", "failed"),
    }
    assert commands(fabric_manager, facts, driver="535", nvswitch=True) == [
        APT_DOWNGRADE + "'nvidia-fabricmanager-535=535.129.03-*' 'libnvidia-nscq-535=535.129.03-*'"
    ]
    facts[FabricManager] = FabricManagerState("535.129.03", "active")
    assert commands(fabric_manager, facts, driver="535", nvswitch=True) == []


def test_pcie_nodes_and_unmanaged_drivers_get_no_fabric_manager():
    facts = {Os: os_fact("ubuntu-22.04"), NvidiaDriver: DriverState("535.129.03", "535.129.03")}
    out, _ = run_notes(fabric_manager, facts, driver="535", nvswitch=False)
    assert out == []
    assert commands(fabric_manager, facts, driver=None, nvswitch=True) == []


# --- what the deploy decides from facts ----------------------------------------------------


def _decide(decision, facts: dict, **gpu):
    """Run one of the deploy's decisions on a host with these facts."""
    from pyinfra.context import ctx_host, ctx_state

    spec = lab_host(fabric="infiniband", gpu={"count": 8, "driver_version": "570", **gpu})
    with ctx_state.use(FactState()), ctx_host.use(FactHost("node1", facts)):
        return decision(spec)


def test_nvswitch_and_flavor_come_from_the_node_unless_declared():
    hgx = {NvSwitches: ("0000:05:00.0", "0000:06:00.0"), Gpus: [Gpu("NVIDIA H100 80GB HBM3", "9.0", "535.129.03")]}

    def on_nvswitch(spec):
        return spec.node.gpu.on_nvswitch(bool(fact(NvSwitches)))

    assert _decide(on_nvswitch, hgx) is True
    assert _decide(on_nvswitch, {}) is False
    assert _decide(on_nvswitch, {}, nvswitch=True) is True  # Blackwell: off the PCI bus
    assert _decide(lambda s: node_flavor(s.node.gpu, "535"), hgx) == "proprietary"
    blackwell = {Gpus: [Gpu("NVIDIA B200", "10.0", "570.133.20")]}
    assert _decide(lambda s: node_flavor(s.node.gpu, "570"), blackwell) == "open"
    with pytest.raises(ValueError, match="sm_100 GPUs run only"):
        _decide(lambda s: node_flavor(s.node.gpu, "570"), blackwell, kernel_modules="proprietary")


def test_peer_memory_is_wanted_on_hca_fabrics_unless_gpudirect_is_off(tmp_path):
    from rdmaprov.inventory.loader import load_inventory

    def wanted(fabric: str, gpudirect: str) -> bool:
        path = tmp_path / "inv.yaml"
        path.write_text(
            f"cluster: {{name: c, gates: {{rail: {{gpudirect: '{gpudirect}'}}}}}}\n"
            f"defaults: {{fabric: {fabric}, rdma: {{netdevs: [eth0]}}, "
            "gpu: {count: 1, cuda_version: '12.4'}, nccl: {version: 2.21.5-1}}\n"
            "hosts: {gpu1: {address: 10.0.0.1}}\n"
        )
        inventory = load_inventory(path)
        return wants_peer_memory(NodeContext(inventory.hosts["gpu1"], inventory, ["gpu1"]))

    assert wanted("infiniband", "auto") and wanted("roce", "required")
    assert not wanted("infiniband", "off") and not wanted("softroce", "auto")


# --- verify: the fabric as the node reports it ---------------------------------------------

# `nv-fabricmanager --version` as a B300 node printed it (610.57.04), its version made the H800's
_FM_VERSION = (PUBLIC / "nv-fabricmanager_version_610.57.04_build_info_line_no_trailing_newline_B300.txt").read_text()
_FM_ACTIVE = [*_FM_VERSION.splitlines()[1:3], "service active"]


def _fabric_findings(nvidia_smi_q: str, nvswitches: list[str], manager: list[str], **gpu) -> dict:
    text = (
        "@@ gpus\nNVIDIA H800, 9.0, 610.57.04\n@@ nvidia_smi_q\n"
        + nvidia_smi_q
        + "\n@@ nvswitches\n"
        + "\n".join(nvswitches)
        + "\n@@ fabric_manager\n"
        + "\n".join(manager)
    )
    findings = verify_node(lab_host(gpu={"count": 1, **gpu}), parse_node_report(text))
    return {(f.id, f.subject): f for f in findings if f.id in ("gpu.fabric", "gpu.fabric_manager")}


def test_an_nvswitch_node_whose_fabric_is_up_passes():
    found = _fabric_findings(H800.read_text(), ["0000:05:00.0"], _FM_ACTIVE)
    assert set(found) == {("gpu.fabric_manager", "fabric"), ("gpu.fabric", "gpu0 00000000:18:00.0")}
    assert all(f.ok and not f.unknown for f in found.values())
    assert found[("gpu.fabric", "gpu0 00000000:18:00.0")].found == "Completed, Success"


def test_the_fabric_managers_version_is_read_from_its_own_words():
    assert parse_fabric_manager(_FM_VERSION.splitlines() + ["service active"]) == FabricManagerState(
        "610.57.04", "active"
    )


def test_a_fabric_manager_of_another_version_or_stopped_fails_with_what_to_do():
    other = [_FM_VERSION.splitlines()[1].replace("610.57.04", "610.43.02"), "service failed"]
    manager = _fabric_findings(H800.read_text(), ["0000:05:00.0"], other)[("gpu.fabric_manager", "fabric")]
    assert not manager.ok and manager.expected == "active, 610.57.04" and manager.found == "failed, 610.43.02"
    assert "refuses to run with driver 610.57.04" in manager.hint and manager.deploy == "gpu_driver"
    missing = _fabric_findings(H800.read_text(), ["0000:05:00.0"], ["service inactive"])
    assert "installs the fabric manager" in missing[("gpu.fabric_manager", "fabric")].hint


@pytest.mark.parametrize(
    ("capture", "found", "hint"),
    [
        # an 8 x H100 node whose fabric manager had not started (driver 570.133.20)
        (
            "nvidia-smi_q_i0_grep_fabric_state_in_progress_status_NA_8xH100_570.133.20_fm_not_started.txt",
            "In Progress, N/A",
            "GPUs wait In Progress until the fabric manager runs",
        ),
        (
            "nvidia-smi_q_fabric_section_completed_status_insufficient_resources_cliqueid_0_deindented.txt",
            "Completed, Insufficient Resources",
            "could not set up this GPU's NVLinks",
        ),
    ],
)
def test_a_gpu_whose_fabric_is_not_set_up_is_named_with_the_hint(capture, found, hint):
    """The captured Fabric section put in place of the H800's (one GPU's -q, as nvidia-smi nests it)."""
    section = [line.strip() for line in (PUBLIC / capture).read_text().splitlines()]
    state, status = (
        next(line.split(": ", 1)[1] for line in section if line.startswith(key)) for key in ("State", "Status")
    )
    text = H800.read_text()
    pad = " " * 29  # the H800 capture's own alignment
    broken = text.replace(f"State{pad}: Completed", f"State{pad}: {state}")
    broken = broken.replace(f"Status{pad[1:]}: Success", f"Status{pad[1:]}: {status}")
    assert broken != text
    findings = _fabric_findings(broken, ["0000:05:00.0"], _FM_ACTIVE)
    [fabric] = [f for (i, _), f in findings.items() if i == "gpu.fabric"]
    assert not fabric.ok and fabric.found == found and hint in fabric.hint


def test_a_pcie_gpu_without_nvswitch_reads_not_applicable_never_a_failure():
    """The H100 PCIe captured on the lent GPU machine: Fabric N/A, no NVSwitch on its bus."""
    found = _fabric_findings(H100_PCIE.read_text(), [], ["service inactive"])
    [(key, finding)] = found.items()
    assert key == ("gpu.fabric_manager", "fabric") and finding.ok
    assert finding.found == "not applicable: no NVSwitch on this node's PCI bus"


def test_a_declared_nvswitch_node_whose_driver_reports_no_fabric_is_unknown():
    text = H100_PCIE.read_text()
    found = _fabric_findings(text, [], ["service inactive"], nvswitch=True)
    fabric = [f for (i, _), f in found.items() if i == "gpu.fabric"]
    assert fabric and all(f.unknown and "no fabric state" in f.found for f in fabric)


def test_nvswitch_addresses_and_fabric_manager_lines_hostile_or_empty():
    assert parse_nvswitches(["0000:05:00.0", "garbage", "", "0000:zz:00.0", " 0000:06:00.0 "]) == (
        "0000:05:00.0",
        "0000:06:00.0",
    )
    assert parse_fabric_manager([]) == FabricManagerState()
    assert parse_fabric_manager(["bash: nv-fabricmanager: command not found", "service "]) == FabricManagerState()
    assert parse_fabric_manager(["\x00\xff", "service unknown"]) == FabricManagerState("", "unknown")


# --- DCGM ----------------------------------------------------------------------------------

NVVS = (PUBLIC / "nvvs_json_dcgm_3.1.0_8gpu_pass_warning_line_before_json_nulls_in_tests.txt").read_text()


@pytest.mark.parametrize(
    ("driver", "package"),
    [
        ("470.256.02", "datacenter-gpu-manager"),
        ("535", "datacenter-gpu-manager-4-cuda12"),
        ("580.159.04", "datacenter-gpu-manager-4-cuda13"),
    ],
)
def test_dcgm_is_the_one_built_for_the_drivers_cuda_major(driver, package):
    assert dcgm_package(driver) == package


def test_dcgm_is_wanted_where_the_driver_is_managed_unless_declared():
    assert lab_host(gpu={"count": 8, "driver_version": "535"}).node.gpu.dcgm
    assert not lab_host(gpu={"count": 8}).node.gpu.dcgm
    assert not lab_host(gpu={"count": 8, "driver_version": "535", "dcgm": False}).node.gpu.dcgm
    assert lab_host(gpu={"count": 8, "dcgm": True}).node.gpu.dcgm


def test_the_report_runs_dcgms_diagnostic_only_when_asked_and_bounded():
    assert "dcgmi" not in node_report_command()
    command = node_report_command((), dcgm_level=3)
    assert "@@ dcgm_diag'; { if command -v dcgmi >/dev/null; then timeout -k 10 2700 dcgmi diag -r 3 -j" in command
    spec = lab_host(gpu={"count": 8, "driver_version": "535"})
    assert report_arguments(spec, 1) == {
        "programs": (),
        "dcgm_level": 1,
        "roce_qos": False,
        "frameworks": (),
        "qos_firmware": False,
        "enroot": False,
    }
    assert report_arguments(lab_host(), 1) == {
        "programs": (),
        "dcgm_level": 0,
        "roce_qos": False,
        "frameworks": (),
        "qos_firmware": False,
        "enroot": False,
    }


def _dcgm_findings(section: str) -> list:
    report = parse_node_report("@@ gpus\nNVIDIA H100 80GB HBM3, 9.0, 580.159.04\n@@ dcgm_diag\n" + section)
    return [f for f in verify_node(lab_host(gpu={"count": 1}), report) if f.id == "gpu.dcgm_diag"]


def test_a_passing_diagnostic_is_one_finding_saying_how_many_results_passed():
    [found] = _dcgm_findings(NVVS)
    assert found.ok and found.found == "17 results passed (DCGM 3.1.0)"


def test_a_failed_test_is_named_on_its_gpu_with_what_to_do():
    """The real output with the software test's result for GPU 5 turned to a failure (no public
    failing run was found whole)."""
    failing = NVVS.replace(
        '"gpu_ids" : 5,\n\t\t\t\t\t\t\t\t"status" : "PASS"', '"gpu_ids" : 5,\n\t\t\t\t\t\t\t\t"status" : "FAIL"'
    )
    assert failing != NVVS
    [found] = _dcgm_findings(failing)
    assert not found.ok and found.subject == "gpu5 Custom/software" and "check of the node's software" in found.hint
    memory = failing.replace('"name" : "software"', '"name" : "Memory"').replace('"Custom"', '"Hardware"')
    [found] = _dcgm_findings(memory)
    assert found.subject == "gpu5 Hardware/Memory" and "RMA the GPU" in found.hint


def test_skipped_results_are_not_counted_as_passed():
    skipped = NVVS.replace('"status" : "PASS"', '"status" : "SKIP"', 3)
    [found] = _dcgm_findings(skipped)
    assert found.ok and found.found == "14 results passed, 3 skipped or not run (DCGM 3.1.0)"


@pytest.mark.parametrize(
    ("section", "why"),
    [
        ("rdmaprov: dcgmi is not installed (NVIDIA DCGM)", "dcgmi is not installed (NVIDIA DCGM)"),
        ("rdmaprov: dcgmi diag -r 3 ran past 2700 s and was stopped", "ran past 2700 s"),
        ("Error: unable to establish a connection to the specified host: localhost", "unable to establish"),
    ],
)
def test_a_diagnostic_that_gave_no_results_is_unknown_with_the_reason(section, why):
    [found] = _dcgm_findings(section)
    assert found.unknown and why in found.found
    # asking whether the host engine runs fits only dcgmi's own error (seen on a real H100 without DCGM)
    assert ("is nvidia-dcgm, its host engine, running?" in found.found) == section.startswith("Error")


def test_peer_memory_loads_only_where_the_kernel_has_the_api_and_persistence_is_on_at_boot():
    from rdmaprov.deploys.gpu_driver import PERSISTENCED
    from rdmaprov.facts.gpu import PeerMemoryApi

    assert PeerMemoryApi().process(["yes"]) is True and PeerMemoryApi().process(["no"]) is False
    assert "ib_register_peer_memory_client' /proc/kallsyms" in PeerMemoryApi().command()
    # the packaged Ubuntu unit runs --no-persistence-mode and cannot be enabled: rdmaprov's can
    assert "--persistence-mode" in PERSISTENCED and "--no-persistence-mode" not in PERSISTENCED
    assert "[Install]\nWantedBy=multi-user.target" in PERSISTENCED
