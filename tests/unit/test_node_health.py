"""Node health beyond configuration (#18): the NCCL that nccl-tests and plugins really load, HCA
PCIe links, NVLinks, MIG, fleet consistency per release, and checks that could not be judged."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rdmaprov.facts.node import NodeFacts
from rdmaprov.health.checks import verify_node
from rdmaprov.health.fleet import fleet_findings
from rdmaprov.health.verify import HostVerification, report_programs
from rdmaprov.inventory.model import HostSpec, SSHSettings
from rdmaprov.parsers.node import Gpu, parse_node_report
from rdmaprov.report.junit import junit_xml
from tests.conftest import FIXTURES
from tests.support.inventories import node_config

LAB = FIXTURES / "lab"
PUBLIC = FIXTURES / "public"


def _host(name: str = "node1", **node) -> HostSpec:
    base = {
        "fabric": "softroce",
        "netns_mode": "exclusive",
        "rdma": {"netdevs": ["eth0"], "devices": ["rxe0"], "port": 1, "storage_hcas": []},
        "limits": {"memlock": "unlimited"},
    }
    base.update(node)
    return HostSpec(name, "10.77.0.11", SSHSettings(), ("nodes",), node_config(base))


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
    """The whole node report command, run here for real, parsed as verify parses it."""
    command = NodeFacts().command(programs=programs)
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    return parse_node_report(output)


def test_the_nccl_tests_binary_is_judged_by_the_nccl_it_really_loads(tmp_path):
    prefix, tests = tmp_path / "nccl", tmp_path / "nccl-tests"
    _shared_library(prefix / "2.28.9-1-abc" / "lib" / "libnccl.so.2.28.9")
    (prefix / "current").symlink_to("2.28.9-1-abc")
    host = _host(gpu={"count": 1}, nccl={"version": "2.28.9-1", "prefix": str(prefix), "tests": {"prefix": str(tests)}})
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
    assert report_programs(_host()) == ()
    assert report_programs(_host(gpu={"count": 8}, nccl={"version": "2.28.9-1", "tests": {"enabled": False}})) == ()


def test_a_check_that_cannot_be_judged_is_unknown_never_a_silent_pass():
    # GeForce cards report no ECC (N/A): an unknown with the reason, not a failure
    text = (PUBLIC / "nvidia-smi_q_2xRTX4060Ti_550_link_width_4x_of_max_8x.txt").read_text()
    findings = verify_node(_host(gpu={"count": 2}), parse_node_report("@@ nvidia_smi_q\n" + text))
    unknown = {(f.subject, f.id): f for f in findings if f.unknown}
    ecc = unknown[("gpu0 00000000:03:00.0", "gpu.ecc_mode")]
    assert ecc.ok and ecc.found.startswith("unknown: ") and ecc.hint == ""
    assert ("gpu1 00000000:09:00.0", "gpu.ecc_uncorrectable") in unknown

    # a SoftRoCE device has no PCIe link of its own
    lab = verify_node(_host(), parse_node_report((LAB / "node_report_rxe.txt").read_text()))
    [pcie] = [f for f in lab if f.id == "rdma.pcie_link"]
    assert pcie.unknown and pcie.subject == "rxe0" and "SoftRoCE" in pcie.found
    assert [f for f in lab if not f.ok] == []

    # JUnit reports it as skipped, with why
    result = HostVerification("node1", "10.77.0.11", findings=lab)
    xml = junit_xml("lab", [result], [])
    assert 'skipped="1"' in xml and '<skipped message="unknown: a SoftRoCE device' in xml


def _versions(kernel: str, rdma_core: str, release: str) -> str:
    return f"@@ versions\n{kernel}\n{rdma_core}\n{release}\n"


def test_fleet_compares_distro_versions_within_a_release_and_the_job_stack_across_all():
    hosts = {name: _host(name) for name in ("a1", "a2", "b1", "b2")}
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
        for f in verify_node(_host(rdma={"netdevs": ["eth0"], "devices": ["rxe0"], "gid_index": 3}), report)
        if f.id == "rdma.gid"
    ]
    assert not gid.ok and gid.check == "GID index 3" and gid.found == "no GID at that index"
    assert "RoCE v2 GIDs are at 0 (eth0), 1 (eth0)" in gid.hint
    assert gid.hint.endswith("to 1 (IPv4-mapped, as NCCL usually wants)")


def test_a_fleet_of_two_that_differ_has_no_majority_and_says_the_newest_counts():
    hosts = {name: _host(name) for name in ("n1", "n2")}
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
    [slow] = [f for f in verify_node(_host(gpu={"count": 1}), report) if f.id == "gpu.hw_slowdown"]
    assert not slow.ok and slow.found == "SW Thermal Slowdown" and "cooling" in slow.hint
