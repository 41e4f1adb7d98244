"""Node health beyond configuration (#18): the NCCL that nccl-tests and plugins really load, HCA
PCIe links, NVLinks, MIG, fleet consistency per release, and checks that could not be judged."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rdmaprov.facts.node import NodeFacts
from rdmaprov.facts.packed import MARK
from rdmaprov.health.checks import report_programs, verify_node
from rdmaprov.health.fleet import fleet_findings
from rdmaprov.health.verify import HostVerification
from rdmaprov.parsers.ldd import Linkage
from rdmaprov.parsers.node import Gpu, parse_node_report
from rdmaprov.report.junit import junit_xml
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host

LAB = FIXTURES / "lab"
PUBLIC = FIXTURES / "public"


def _shared_library(path: Path) -> None:
    """A real ELF shared object named like NCCL's, with its soname."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / "empty.c"
    source.write_text("int nccl_marker(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), "-Wl,-soname,libnccl.so.2", str(source)], check=True)
    (path.parent / "libnccl.so.2").symlink_to(path.name)


def _program(path: Path, library_dir: Path) -> None:
    """A real program that needs libnccl.so.2, found through its RUNPATH (as a build under a
    prefix is), like nccl-tests' binaries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    subprocess.run(
        [
            "gcc",
            "-o",
            str(path),
            str(source),
            "-Wl,--no-as-needed",
            f"-L{library_dir}",
            "-l:libnccl.so.2",
            f"-Wl,-rpath,{library_dir}",
        ],
        check=True,
    )


def _report_of_this_machine(programs: tuple[str, ...]):
    """The whole node report command, run here for real (packed for SSH), read as verify reads it."""
    command = NodeFacts().command(programs=programs)
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    assert output.startswith(MARK + "\n"), output[:200]  # this machine has gzip and base64
    return NodeFacts().process(output.splitlines())


def test_the_nccl_tests_binary_is_judged_by_the_nccl_it_really_loads(tmp_path):
    prefix, tests = tmp_path / "nccl", tmp_path / "nccl-tests"
    _shared_library(prefix / "2.28.9-1-abc" / "lib" / "libnccl.so.2.28.9")
    (prefix / "current").symlink_to("2.28.9-1-abc")
    host = lab_host(
        gpu={"count": 1}, nccl={"version": "2.28.9-1", "prefix": str(prefix), "tests": {"prefix": str(tests)}}
    )
    [program] = report_programs(host)
    assert program == f"{tests}/current/bin/all_reduce_perf"
    _program(Path(program), prefix / "current" / "lib")

    report = _report_of_this_machine((program,))
    assert report.linkage[program].libraries == {"libnccl.so.2": f"{prefix}/2.28.9-1-abc/lib/libnccl.so.2.28.9"}
    [tests_nccl] = [f for f in verify_node(host, report) if f.id == "nccl.tests_library"]
    assert tests_nccl.ok and tests_nccl.found == f"{program} → {prefix}/2.28.9-1-abc/lib/libnccl.so.2.28.9"

    # built against another NCCL (a copy elsewhere, older): named, and the fix
    _shared_library(tmp_path / "image" / "libnccl.so.2.27.3")
    Path(program).unlink()
    _program(Path(program), tmp_path / "image")
    [wrong] = [f for f in verify_node(host, _report_of_this_machine((program,))) if f.id == "nccl.tests_library"]
    assert not wrong.ok and wrong.found.endswith("/image/libnccl.so.2.27.3")
    assert wrong.expected == f"libnccl.so.2 2.28.9 under {prefix}" and "builds nccl-tests" in wrong.hint

    # its NCCL gone: the dynamic linker cannot resolve it
    for f in (tmp_path / "image").glob("libnccl*"):
        f.unlink()
    [gone] = [f for f in verify_node(host, _report_of_this_machine((program,))) if f.id == "nccl.tests_library"]
    assert not gone.ok and gone.found == f"{program}: libnccl.so.2 not found"

    # not built at all
    Path(program).unlink()
    [missing] = [f for f in verify_node(host, _report_of_this_machine((program,))) if f.id == "nccl.tests_library"]
    assert not missing.ok and missing.found == f"{program} is missing"


def test_only_gpu_nodes_with_nccl_tests_ask_for_their_linkage():
    assert report_programs(lab_host()) == ()
    assert report_programs(lab_host(gpu={"count": 8}, nccl={"version": "2.28.9-1", "tests": {"enabled": False}})) == ()


def test_a_check_that_cannot_be_judged_is_unknown_never_a_silent_pass():
    # GeForce cards report no ECC (N/A): an unknown with the reason, not a failure
    text = (PUBLIC / "nvidia-smi_q_2xRTX4060Ti_550_link_width_4x_of_max_8x.txt").read_text()
    findings = verify_node(lab_host(gpu={"count": 2}), parse_node_report("@@ nvidia_smi_q\n" + text))
    unknown = {(f.subject, f.id): f for f in findings if f.unknown}
    ecc = unknown[("gpu0 00000000:03:00.0", "gpu.ecc_mode")]
    assert ecc.ok and ecc.found.startswith("unknown: ") and ecc.hint == ""
    assert ("gpu1 00000000:09:00.0", "gpu.ecc_uncorrectable") in unknown

    # a SoftRoCE device has no PCIe link of its own
    lab = verify_node(lab_host(), parse_node_report((LAB / "node_report_rxe.txt").read_text()))
    [pcie] = [f for f in lab if f.id == "rdma.pcie_link"]
    assert pcie.unknown and pcie.subject == "rxe0" and "SoftRoCE" in pcie.found
    assert pcie.expected == "x? at ?"  # what the link should be is not known either, and says so
    assert [f for f in lab if not f.ok] == []

    # JUnit reports it as skipped, with why
    result = HostVerification("node1", "10.77.0.11", findings=lab)
    xml = junit_xml("lab", [result], [])
    assert 'skipped="1"' in xml and '<skipped message="unknown: a SoftRoCE device' in xml


def _versions(kernel: str, rdma_core: str, release: str) -> str:
    return f"@@ versions\n{kernel}\n{rdma_core}\n{release}\n"


def test_fleet_compares_distro_versions_within_a_release_and_the_job_stack_across_all():
    hosts = {name: lab_host(name) for name in ("a1", "a2", "b1", "b2")}
    reports = {
        "a1": parse_node_report(_versions("6.1.0-41-amd64", "44.0-2", "debian 12")),
        "a2": parse_node_report(_versions("6.1.0-41-amd64", "44.0-2", "debian 12")),
        # half the cluster already upgraded to Debian 13: another kernel and rdma-core, by design
        "b1": parse_node_report(_versions("6.12.48+deb13-amd64", "56.1-1", "debian 13")),
        "b2": parse_node_report(_versions("6.12.48+deb13-amd64", "56.1-1", "debian 13")),
    }
    for name, cuda in (("a1", "12.4"), ("a2", "12.4"), ("b1", "12.4"), ("b2", "12.2")):
        reports[name].gpus = [Gpu("NVIDIA H100 80GB HBM3", "9.0", "550.54.15")]
        reports[name].cuda_toolkits = [cuda]
    found = fleet_findings(hosts, reports)
    failed = {(name, f.id): f for name, fs in found.items() for f in fs if not f.ok}
    # kernel and rdma-core were compared per release: nothing odd; b2's CUDA is odd across all four
    assert list(failed) == [("b2", "fleet.cuda")]
    assert failed[("b2", "fleet.cuda")].expected == "12.4 (as on 3 of 4 nodes)"
    subjects = {f.subject for f in found["b1"]}
    assert {"kernel on debian 13", "rdma-core on debian 13", "GPU driver", "CUDA toolkits"} <= subjects
    # one node of a release that missed its reboot still stands out among its own release
    reports["a2"] = parse_node_report(_versions("6.1.0-40-amd64", "44.0-2", "debian 12"))
    assert [f.id for f in fleet_findings(hosts, reports)["a2"] if not f.ok] == ["fleet.kernel"]


def test_the_release_is_read_from_os_release_without_running_it():
    report = _report_of_this_machine(())
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    assert report.release == f"{release['ID']} {release['VERSION_ID'].strip(chr(34))}"


def test_a_wrong_gid_index_names_where_the_ports_roce_v2_gids_are():
    report = parse_node_report((LAB / "node_report_rxe.txt").read_text())
    [gid] = [
        f
        for f in verify_node(lab_host(rdma={"netdevs": ["eth0"], "devices": ["rxe0"], "gid_index": 3}), report)
        if f.id == "rdma.gid"
    ]
    assert not gid.ok and gid.check == "GID index 3" and gid.found == "no GID at that index"
    assert "RoCE v2 GIDs are at 0 (eth0), 1 (eth0)" in gid.hint
    assert gid.hint.endswith("to 1 (IPv4-mapped, as NCCL usually wants)")


def test_a_fleet_of_two_that_differ_has_no_majority_and_says_the_newest_counts():
    hosts = {name: lab_host(name) for name in ("n1", "n2")}
    reports = {
        "n1": parse_node_report(_versions("6.1.0-41-amd64", "44.0-2", "debian 12")),
        "n2": parse_node_report(_versions("6.1.0-41-amd64", "44.0-1+rdmaprovtest", "debian 12")),
    }
    [odd] = [f for f in fleet_findings(hosts, reports)["n2"] if not f.ok]
    assert odd.expected == "44.0-2 (as on 1 of 2 nodes; no majority, so the newest counts)"
    assert all(f.ok for f in fleet_findings(hosts, reports)["n1"])


def test_a_gpu_past_its_software_thermal_limit_is_a_slowdown_to_fix():
    text = (FIXTURES / "gpu-h100" / "nvidia-smi_q.txt").read_text()
    hot = text.replace(
        "        SW Thermal Slowdown                            : Not Active",
        "        SW Thermal Slowdown                            : Active",
    )
    assert hot != text
    report = parse_node_report("@@ nvidia_smi_q\n" + hot)
    [slow] = [f for f in verify_node(lab_host(gpu={"count": 1}), report) if f.id == "gpu.hw_slowdown"]
    assert not slow.ok and slow.found == "SW Thermal Slowdown" and "cooling" in slow.hint


def test_a_truncated_nvidia_smi_q_gives_unknowns_not_passes():
    """Cut off after the PCI section (a command that timed out, a pasted excerpt): what is
    missing is unknown, what is there is judged, nothing crashes."""
    text = (FIXTURES / "gpu-h100" / "nvidia-smi_q.txt").read_text()
    cut = text[: text.index("    Clocks Event Reasons")]
    findings = verify_node(lab_host(gpu={"count": 1}), parse_node_report("@@ nvidia_smi_q\n" + cut))
    gpu = {f.id: f for f in findings if f.subject.startswith("gpu0")}
    assert {i for i, f in gpu.items() if f.unknown} == {
        "gpu.ecc_mode",
        "gpu.ecc_uncorrectable",
        "gpu.row_remap",
        "gpu.hw_slowdown",
    }
    assert {i for i, f in gpu.items() if not f.unknown} == {"gpu.pcie_width", "gpu.persistence", "gpu.mig_mode"}
    assert all(f.ok for f in gpu.values())


def _nvlinks(name: str):
    from rdmaprov.parsers.nvlink import parse_nvlink_status

    return parse_nvlink_status((PUBLIC / name).read_text())


def _nvlink_findings(text: str, gpus: int) -> list:
    report = parse_node_report("@@ nvlink\n" + text)
    return [f for f in verify_node(lab_host(gpu={"count": gpus}), report) if f.id == "gpu.nvlink"]


def test_nvlink_status_of_real_nodes_and_what_counts_as_a_lost_link():
    # healthy nodes of every generation pass, including a bridged PCIe pair that uses 12 of 18 links
    for name, gpus, links in (
        ("nvidia-smi_nvlink_status_i0_H100-80GB-HBM3_healthy_18links.txt", 1, 18),
        ("nvidia-smi_nvlink_status_8xH800_8links_26.562_abridged.txt", 3, 8),
        ("nvidia-smi_nvlink_status_B300-SXM6_7_GPUs_listed_18links_53.125.txt", 7, 18),
        ("nvidia-smi_nvlink_s_H100-PCIe_2gpu_bridge_12of18_active_6_inactive.txt", 2, 12),
    ):
        parsed = _nvlinks(name)
        assert len(parsed) == gpus and {len(g.active) for g in parsed} == {links}, name
        found = _nvlink_findings((PUBLIC / name).read_text(), gpus)
        assert len(found) == gpus and all(f.ok and not f.unknown for f in found), name
    [pcie0, _] = _nvlinks("nvidia-smi_nvlink_s_H100-PCIe_2gpu_bridge_12of18_active_6_inactive.txt")
    assert pcie0.inactive == (4, 5, 10, 11, 16, 17)

    # the Azure V100 with links 3 and 5 down (the post keeps GPU 3 only)
    [v100] = _nvlinks("nvidia-smi_nvlink_s_V100-SXM2-32GB_links_3_5_inactive_abridged.txt")
    assert (v100.index, v100.name, v100.active, v100.inactive) == (3, "Tesla V100-SXM2-32GB", (0, 1, 2, 4), (3, 5))

    # PCIe cards without NVLink: nothing to judge
    assert (
        _nvlink_findings(
            (PUBLIC / "nvidia-smi_nvlink_s_A100-PCIE-40GB_no_nvlink_all_links_inActive.txt").read_text(), 2
        )
        == []
    )
    # two bridged RTX A6000 and a third without a bridge: the third cannot be judged
    trio = _nvlink_findings(
        (PUBLIC / "nvidia-smi_nvlink_s_3xRTX-A6000_bridge_pair_14.062_plus_gpu2_all_links_inActive.txt").read_text(), 3
    )
    assert [(f.subject, f.ok, f.unknown) for f in trio] == [
        ("gpu0", True, False),
        ("gpu1", True, False),
        ("gpu2", True, True),
    ]
    assert "no bridge" in trio[2].found

    # one H800 link gone inactive, written as nvidia-smi writes it (the V100 above): that GPU fails
    h800 = (PUBLIC / "nvidia-smi_nvlink_status_8xH800_8links_26.562_abridged.txt").read_text()
    gpu1 = h800.index("GPU 1:")
    broken = h800[:gpu1] + h800[gpu1:].replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    failed = [f for f in _nvlink_findings(broken, 3) if not f.ok]
    assert [(f.subject, f.found, f.expected) for f in failed] == [
        ("gpu1", "7 active, inactive: link 5", "8 active (as on the node's best-connected GPU)")
    ]
    assert "RMA" in failed[0].hint


def _sysfs_values(name: str) -> dict[str, str]:
    """`tail -v` of a PCI device's link files → {file name: value}."""
    values, current = {}, None
    for line in (PUBLIC / name).read_text().splitlines():
        if line.startswith("==> "):
            current = line[4:-4].rsplit("/", 1)[1]
        elif line and current:
            values[current] = line
    return values


def test_pcie_link_values_as_sysfs_writes_them():
    from rdmaprov.parsers.pcie import PciLink, gts, lanes, parse_pci_links

    def link(name: str) -> PciLink:
        v = _sysfs_values(name)
        return PciLink(v["current_link_speed"], v["max_link_speed"], v["current_link_width"], v["max_link_width"])

    down = link("sysfs_tail_v_link_files_0000-01-00.0_16.0GTs_x8_of_32.0GTs_x16_downgraded.txt")
    assert down.known and not down.full and down.describe() == "x8 at 16.0 GT/s PCIe (max x16 at 32.0 GT/s PCIe)"
    full = link("sysfs_tail_v_link_files_0000-03-00.0_32.0GTs_x16_full.txt")
    assert full.known and full.full
    assert (gts("8 GT/s"), gts("Unknown"), lanes("0"), lanes("16")) == (8.0, None, None, 16)

    # the same values as the node report's grep prints them, for an HCA and a SoftRoCE device
    lines = [
        f"/sys/class/infiniband/mlx5_0/device/{name}:{value}"
        for name, value in _sysfs_values(
            "sysfs_tail_v_link_files_0000-01-00.0_16.0GTs_x8_of_32.0GTs_x16_downgraded.txt"
        ).items()
    ]
    assert parse_pci_links(lines + ["/sys/class/infiniband/rxe0/ports/1/rate:10 Gb/sec"]) == {"mlx5_0": down}
    port = "@@ ports\nport mlx5_0 1 state 4: ACTIVE\n"
    report = parse_node_report(port + "@@ pci_links\n" + "\n".join(lines))
    host = lab_host(fabric="roce", rdma={"devices": ["mlx5_0"], "port": 1})
    [pcie] = [f for f in verify_node(host, report) if f.id == "rdma.pcie_link"]
    assert not pcie.ok and pcie.found == "x8 at 16.0 GT/s PCIe" and pcie.expected == "x16 at 32.0 GT/s PCIe"
    assert "LnkSta" in pcie.hint
    # a RoCE HCA whose driver writes no link files (mlx4 in the field): unknown, why named
    [none] = [f for f in verify_node(host, parse_node_report(port)) if f.id == "rdma.pcie_link"]
    assert none.unknown and none.found == "unknown: sysfs reports no PCIe link speed and width for it"


def test_ldd_lines_of_real_nccl_tests_binaries():
    from rdmaprov.parsers.ldd import parse_ldd

    for name, nccl in (
        (
            "ldd_all_reduce_perf_libnccl_from_system_deb_usr_lib_x86_64_mpi40.txt",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
        ),
        (
            "ldd_all_reduce_perf_libnccl_from_home_build_dir_efa_mpi_abridged.txt",
            "/home/ec2-user/nccl/nccl-2.4.6/nccl/build/lib/libnccl.so.2",
        ),
    ):
        lines = ["== /opt/nccl-tests/current/bin/all_reduce_perf", *(PUBLIC / name).read_text().splitlines()]
        [linkage] = parse_ldd(lines).values()
        assert linkage.exists and linkage.libraries["libnccl.so.2"] == nccl and linkage.missing == [], name
        assert "linux-vdso.so.1" not in linkage.libraries


def test_a_data_center_gpu_with_ecc_turned_off_fails_ecc_mode_and_its_counts_are_unknown():
    text = (PUBLIC / "nvidia-smi_q_i0_H800_525_ecc_disabled_ecc_counters_NA_fabric_completed.txt").read_text()
    findings = verify_node(lab_host(gpu={"count": 1}), parse_node_report("@@ nvidia_smi_q\n" + text))
    by_id = {f.id: f for f in findings if f.subject.startswith("gpu0")}
    assert not by_id["gpu.ecc_mode"].ok and by_id["gpu.ecc_mode"].found == "Disabled"
    assert by_id["gpu.ecc_uncorrectable"].unknown and by_id["gpu.mig_mode"].ok


def test_error_counters_are_not_compared_across_a_reboot():
    from rdmaprov.health.counters import counter_findings

    before = {"at": 1000.0, "boot": "0f3c-boot-1", "ports": {"rxe0/1": {"link_downed": 0}}}
    # the link came up at boot and counted a link_downed: after a reboot that is no fault
    after_boot = {"rxe0/1": {"link_downed": 1}}
    [fresh] = counter_findings("node2", "softroce", 1600.0, after_boot, before, "77aa-boot-2")
    assert fresh.ok and fresh.found == "the node rebooted since the last check: new baseline"
    # the same growth within one boot is a flap
    [flap] = counter_findings("node2", "softroce", 1600.0, after_boot, before, "0f3c-boot-1")
    assert not flap.ok and flap.found == "link_downed +1 in 10 min"
    # reads kept before boot ids were recorded are still judged
    [old] = counter_findings("node2", "softroce", 1600.0, after_boot, {**before, "boot": None}, "77aa-boot-2")
    assert not old.ok


def test_the_node_report_carries_this_boots_id():
    report = _report_of_this_machine(())
    assert report.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_the_whole_node_report_of_a_lab_vm_as_it_reads_now():
    """Captured on a converged lab VM with today's NodeFacts command (programs: the nccl-tests
    path the gate would run): every new section parses and verify judges it."""
    report = parse_node_report((LAB / "node_report_rxe_full.txt").read_text())
    assert (report.kernel, report.rdma_core, report.release) == ("6.1.0-50-amd64", "44.0-2", "debian 12")
    assert len(report.boot_id) == 36 and report.pci_links == {} and report.nvlinks == [] and report.cuda_toolkits == []
    assert report.linkage == {"/opt/nccl-tests/current/bin/all_reduce_perf": Linkage(False, {})}
    findings = verify_node(lab_host(), report)
    assert [f.id for f in findings if not f.ok] == []
    assert [(f.id, f.subject) for f in findings if f.unknown] == [("rdma.pcie_link", "rxe0")]


def test_a_declared_net_plugin_that_nccl_did_not_load_fails_the_gate():
    from rdmaprov.health.gates.all_reduce import transport_verdict
    from rdmaprov.health.gates.bandwidth import Bounds, judge
    from rdmaprov.parsers.nccl_debug import parse_nccl_transport

    ok = judge(20.0, "GB/s", Bounds(0.9, 0.92, 1.05, minimum=10.0), None)
    internal = parse_nccl_transport((PUBLIC / "nccl_info_net_ib_using_mlx5_IB_using_network_IB_4ranks.txt").read_text())
    assert internal.plugin_missing == {
        "task272154-tz9m4": "No plugin found (libnccl-net.so), using internal implementation"
    }
    assert transport_verdict(internal, set(), ok) == ok  # no plugin declared: NCCL's own IB is the plan
    failed = transport_verdict(internal, set(), ok, "AIACC")
    assert failed.status == "fail" and failed.reason == (
        "NCCL did not load the AIACC net plugin on task272154-tz9m4 (No plugin found (libnccl-net.so), using "
        f"internal implementation): {ok.reason}"
    )
    # NCCL 2.2x words it differently; the first reason a host gave is the one named
    h100 = parse_nccl_transport((FIXTURES / "gpu-h100" / "all_reduce_perf_nccl_debug_info.txt").read_text())
    assert h100.plugin_missing and all("libnccl-net" in why for why in h100.plugin_missing.values())
    # HPC-X's RDMA/SHARP plugin loaded: nothing missing, the run stands
    hpcx = parse_nccl_transport(
        (PUBLIC / "all_reduce_perf_two_independent_rank0_jobs_same_size_twice_roce_IBext.txt").read_text()
    )
    assert set(hpcx.plugin_loaded.values()) == {"NCCL RDMA Plugin v6 (v6)"} and not hpcx.plugin_missing
    assert transport_verdict(hpcx, set(), ok, "AIACC") == ok


def test_the_nccl_hca_hint_follows_the_cause_a_vanished_device_or_a_wrong_setting():
    """After `rdma link del rxe0` the setting is right and the device is gone: the hint says to bring
    the device back; a setting that names no declared device is the inventory's to fix."""
    text = (LAB / "node_report_rxe.txt").read_text()
    gone = parse_node_report("\n".join(line for line in text.splitlines() if not line.startswith("port rxe0")))
    [hca] = [f for f in verify_node(lab_host(), gone) if f.id == "nccl.hca_matches"]
    assert not hca.ok and hca.hint == (
        "NCCL would fall back to sockets: rxe0, which NCCL_IB_HCA names as the inventory declares, is gone from "
        "the node (rdma.device_present): bring it back (driver, link, card), not the setting"
    )
    wrong = parse_node_report(text.replace("NCCL_IB_HCA=rxe", "NCCL_IB_HCA=mlx5"))
    [hca] = [f for f in verify_node(lab_host(), wrong) if f.id == "nccl.hca_matches"]
    assert not hca.ok and hca.hint.endswith("fix NCCL_IB_HCA in the inventory (nccl.env) or rdma.devices")
