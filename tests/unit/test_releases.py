"""Mixed Debian releases: the lab's --release, the inventory it writes, package names renamed in
Debian 13 (t64), and the all_reduce gate's refusal to span Open MPI 4 and 5."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rdmaprov.engine.session import Session
from rdmaprov.errors import UserError
from rdmaprov.health.gates.mpi import mixed_mpi_reason, version_skew
from rdmaprov.inventory import load_inventory
from rdmaprov.lab.lab import Lab, LabSettings, write_inventory
from rdmaprov.lab.nodes import Node
from rdmaprov.lab.releases import find_release, node_releases
from rdmaprov.packages import CONTAINER_RUNTIMES, SLURM_CONTROLLER, SLURM_NODE, lab_packages
from rdmaprov.parsers.mpi import MpiVersion, parse_mpirun_version
from rdmaprov.parsers.system import parse_installed_packages, parse_os_release
from tests.conftest import FIXTURES, REPO
from tests.support.inventories import gates_config

LAB = FIXTURES / "lab"


def _codenames(spec: str, nodes: int | None) -> list[str]:
    return [r.codename for r in node_releases(spec, nodes)]


def test_release_for_all_nodes_or_one_per_node():
    assert _codenames("bookworm", None) == ["bookworm", "bookworm"]
    assert _codenames("trixie", 3) == ["trixie"] * 3
    assert _codenames("bookworm,trixie", None) == ["bookworm", "trixie"]
    assert _codenames("12, 13,debian13", 3) == ["bookworm", "trixie", "trixie"]
    assert find_release("Debian-13").version == "13"


@pytest.mark.parametrize(
    "spec, nodes, message",
    [
        (
            "sid",
            None,
            "--release 'sid': the lab has no such Debian release (fix: use one of bookworm (12), trixie (13), "
            "trixie-backports)",
        ),
        ("bookworm,trixie", 3, "--release names 2 releases for --nodes 3: give one release for every node, or one "),
        ("bookworm,trixie", 3, "(fix: e.g. --release bookworm,bookworm,trixie)"),
        ("bookworm,,trixie", None, "an empty release name"),
    ],
)
def test_release_mistakes_say_what_to_write(spec, nodes, message):
    with pytest.raises(UserError) as caught:
        node_releases(spec, nodes)
    assert message in str(caught.value)


def test_lab_inventory_of_a_mixed_lab_leaves_the_suite_to_each_node(tmp_path):
    lab = Lab(tmp_path)
    nodes = [
        Node(f"node{i}", f"10.77.0.{10 + i}", 24, "vm", str(tmp_path / f"node{i}"), release=release)
        for i, release in enumerate(["bookworm", "bookworm", "trixie"], start=1)
    ]
    write_inventory(lab, LabSettings(release="bookworm,bookworm,trixie"), nodes, "10.77.0.1")
    text = lab.inventory.read_text()
    assert "\n      suite:" not in text  # the mirror serves bookworm and trixie; each node asks for its own
    assert "      node3:  # Debian 13 (trixie)\n        address: 10.77.0.13\n" in text
    inventory = load_inventory(lab.inventory, require_files=False)
    assert inventory.host_names() == ["node1", "node2", "node3"]
    assert inventory.hosts["node3"].node.apt_mirror.suite is None


def test_debian13_t64_libraries_count_as_their_old_names():
    """Captured on a Debian 13 root with the node stack installed: librdmacm1 is now librdmacm1t64,
    which provides the old name, so the stack's package list stays one list for both releases."""
    text = (LAB / "dpkg_query_provides_debian13.txt").read_text()
    assert "ii  librdmacm1t64 librdmacm1 (= 56.1-1)" in text
    installed = parse_installed_packages(text)
    # the capture's node ran no Slurm and no container runtime (opt-in: the mirror carries their packages)
    runtimes = [name for table in CONTAINER_RUNTIMES.values() for name in table["debian"]]
    opt_in = set(SLURM_CONTROLLER["debian"] + SLURM_NODE["debian"] + runtimes)
    assert set(lab_packages()) - opt_in <= installed
    assert {"librdmacm1t64", "librdmacm1", "libssl3", "libssl3t64", "rdma-core"} <= installed
    assert "(=" not in " ".join(installed) and not any(name.endswith(",") for name in installed)
    assert parse_installed_packages("rc  libold1t64 libold1 (= 1.0)\n") == set()


def test_debian13_os_release():
    trixie = parse_os_release((FIXTURES / "os-release" / "debian-13").read_text())
    assert (trixie.family, trixie.codename, trixie.major) == ("debian", "trixie", "13")


def test_mpirun_versions_of_both_releases():
    assert parse_mpirun_version((LAB / "mpirun_version_openmpi4_debian12.txt").read_text()) == MpiVersion(
        "Open MPI", "4.1.4"
    )
    five = parse_mpirun_version((LAB / "mpirun_version_openmpi5_debian13.txt").read_text())
    assert five == MpiVersion("Open MPI", "5.0.7") and five.series == "Open MPI 5"
    assert parse_mpirun_version("") is None


def test_all_reduce_refuses_to_span_open_mpi_4_and_5_and_says_what_to_do():
    four, five = MpiVersion("Open MPI", "4.1.4"), MpiVersion("Open MPI", "5.0.7")
    assert mixed_mpi_reason({"node1": four, "node2": MpiVersion("Open MPI", "4.1.6")}) is None
    reason = mixed_mpi_reason({"node1": four, "node2": four, "node3": five})
    assert reason is not None
    assert reason.startswith(
        "one MPI job cannot span these nodes: Open MPI 4.1.4 on node1, node2; Open MPI 5.0.7 on node3."
    )
    assert "rdmaprov verify --gates --limit node1,node2" in reason and "mpi.source: archive ships one" in reason
    assert version_skew({"node1": four, "node2": four}) is None
    missing = mixed_mpi_reason({"node1": four, "node2": "`mpirun --version` failed: sh: 1: mpirun: not found"})
    assert missing == (
        "no usable mpirun on node2 (node2: `mpirun --version` failed: sh: 1: mpirun: not found): run `rdmaprov "
        "apply` (openmpi) or fix mpi.prefix"
    )


def test_one_series_at_different_versions_runs_but_a_pass_is_only_a_warning():
    """Open MPI 4.1.4 beside 4.1.6 may start one job, but Open MPI supports a job only with the
    same version everywhere: the gate runs and says so, and its pass becomes a warning."""
    from rdmaprov.health.gates.all_reduce import skewed
    from rdmaprov.health.gates.result import GateResult
    from rdmaprov.health.gates.subject import Subject

    versions = {"node1": MpiVersion("Open MPI", "4.1.4"), "node2": MpiVersion("Open MPI", "4.1.6")}
    assert mixed_mpi_reason(versions) is None
    result = skewed(GateResult("all_reduce", Subject.parse("node1,node2"), True, "busbw 90 GB/s >= 80 GB/s"), versions)
    assert (result.passed, result.status) == (True, "warn")
    assert result.reason == (
        "busbw 90 GB/s >= 80 GB/s; the nodes run different versions of their MPI (Open MPI 4.1.4 on node1; "
        "Open MPI 4.1.6 on node2): Open MPI supports a job only with the same version on every node; install one "
        "(mpi.source: archive ships one)"
    )
    failed = skewed(GateResult("all_reduce", Subject.parse("node1,node2"), False, "slow", status="fail"), versions)
    assert failed.status == "fail" and "different versions of their MPI" in failed.reason
    same = {"node1": versions["node1"], "node2": versions["node1"]}
    assert skewed(GateResult("all_reduce", Subject.parse("node1,node2"), True, "ok"), same).status == "pass"


def test_mixed_mpi_groups_come_in_inventory_order_whoever_answers_first(tmp_path):
    """CI saw node3 (Open MPI 5) answer `mpirun --version` before node1 and node2, and the refusal
    named its group first: a verdict's words must not depend on which node was quicker."""
    import gevent

    lab = Lab(tmp_path)
    nodes = [Node(f"node{i}", f"10.77.0.{10 + i}", 24, "vm", str(tmp_path / f"node{i}")) for i in (1, 2, 3)]
    write_inventory(lab, LabSettings(), nodes, "10.77.0.1")
    names = ["node1", "node2", "node3"]
    versions = {"node1": MpiVersion("Open MPI", "4.1.4"), "node2": MpiVersion("Open MPI", "4.1.4")}
    versions["node3"] = MpiVersion("Open MPI", "5.0.7")

    def answer(name: str) -> MpiVersion:
        gevent.sleep(0.02 * (3 - names.index(name)))  # node3 first, node1 last
        return versions[name]

    session = Session(load_inventory(lab.inventory, require_files=False), names)
    answered = session.each(names, answer)
    assert list(answered) == names
    reason = mixed_mpi_reason(answered)
    assert reason is not None and reason.startswith(
        "one MPI job cannot span these nodes: Open MPI 4.1.4 on node1, node2; Open MPI 5.0.7 on node3."
    )


def test_each_release_has_its_own_image():
    from rdmaprov.lab.image import image_dir

    dirs = [image_dir(find_release(r)).name for r in ("bookworm", "trixie", "trixie-backports")]
    assert dirs[0].startswith("debian12-") and dirs[1].startswith("debian13-") and dirs[0][9:] != dirs[1][9:]
    assert dirs[2].startswith("debian13-") and dirs[2] != dirs[1]


def test_the_backports_kernel_is_a_release_of_its_own_name_on_its_debian_release(tmp_path):
    """`trixie-backports`: Debian 13 booting the kernel of trixie-backports. Its nodes take the
    mirror's trixie suite (os-release says trixie); the kernel's suite is only in the image's apt
    sources while the image is made. `13` and `trixie` still mean the release's own kernel."""
    from rdmaprov.lab.image import recipe_hash
    from rdmaprov.lab.mirror import _apt_config

    backports = find_release("trixie-backports")
    assert (backports.codename, backports.version, backports.name) == ("trixie", "13", "trixie-backports")
    assert backports.title == "Debian 13 (trixie, trixie-backports kernel)"
    assert find_release("13").kernel_suite == find_release("trixie").kernel_suite == ""
    assert [r.name for r in node_releases("bookworm,trixie-backports", None)] == ["bookworm", "trixie-backports"]
    # the other releases' images keep the cache key they had before this release existed
    assert recipe_hash(find_release("bookworm")) == "37903781599de0ec"

    class Root:
        rootfs = tmp_path

    conf = _apt_config(backports, Root, tmp_path / "debs")  # type: ignore[arg-type]
    sources = (conf.parent / "etc/sources.list").read_text()
    assert [line.split()[-2] for line in sources.splitlines()] == ["trixie", "trixie-backports"]
    assert conf.parent.name == "trixie-backports"


def test_the_newest_kernel_is_booted_with_its_own_initrd(tmp_path):
    from rdmaprov.lab.image import newest_kernel

    for version in ("6.9.2+deb13-amd64", "6.12.117+deb13-amd64", "7.3.4+deb13-amd64"):
        (tmp_path / f"vmlinuz-{version}").write_text("")
        if version != "7.3.4+deb13-amd64":
            (tmp_path / f"initrd.img-{version}").write_text("")
    kernel, initrd = newest_kernel(tmp_path)  # 7.3.4 has no initrd: not bootable
    assert (kernel.name, initrd.name) == ("vmlinuz-6.12.117+deb13-amd64", "initrd.img-6.12.117+deb13-amd64")
    (tmp_path / "initrd.img-7.3.4+deb13-amd64").write_text("")
    assert newest_kernel(tmp_path)[0].name == "vmlinuz-7.3.4+deb13-amd64"
    with pytest.raises(UserError, match="no kernel with its initrd under"):
        newest_kernel(tmp_path / "boot")


def test_a_container_lab_refuses_a_release_that_only_changes_the_kernel(tmp_path):
    from rdmaprov.lab.lab import up

    with pytest.raises(UserError) as caught:
        up(Lab(tmp_path), LabSettings(release="bookworm,trixie-backports", kind="container"))
    assert str(caught.value) == (
        "rdmaprov: --release bookworm,trixie-backports: trixie-backports boots another kernel, and a container runs "
        "on this machine's own (fix: --kind vm, or the release's codename)"
    )


def test_box_disk_has_one_bootable_partition_after_grub_space(tmp_path: Path):
    import struct

    from rdmaprov.lab.box import PART_START, _partition_table

    raw = tmp_path / "disk.raw"
    with raw.open("wb") as disk:
        disk.truncate(64 * 1024**2)
    _partition_table(raw, 64 * 1024**2)
    mbr = raw.read_bytes()[:512]
    status, _, kind, _, start, count = struct.unpack("<B3sB3sII", mbr[446:462])
    assert (status, kind, start, start + count) == (0x80, 0x83, PART_START, 64 * 1024**2 // 512)
    assert mbr[510:] == b"\x55\xaa" and mbr[462:510] == bytes(48)


VAGRANT = FIXTURES / "vagrant"


def test_vagrant_ssh_config_and_what_each_machine_shows():
    from rdmaprov.lab.vagrant import READ, SPLIT, Machine, choose_interface, inventory_data, known_hosts_lines
    from rdmaprov.parsers.vagrant import parse_host_keys, parse_ipv4_addresses, parse_ssh_config

    machines = parse_ssh_config((VAGRANT / "ssh_config_2_machines.txt").read_text())
    assert [(m.name, m.hostname, m.user, m.port) for m in machines] == [
        ("node1", "10.78.112.36", "vagrant", 22),
        ("node2", "10.78.112.106", "vagrant", 22),
    ]
    assert machines[0].identity.endswith("/project/.vagrant/machines/node1/libvirt/private_key")
    assert SPLIT in READ
    keys, _, addresses = (VAGRANT / "read_node1.txt").read_text().partition(SPLIT)
    assert [kind for kind, _ in parse_host_keys(keys)] == ["ecdsa-sha2-nistp256", "ssh-ed25519", "ssh-rsa"]
    found = parse_ipv4_addresses(addresses)
    assert found == {"lo": ["127.0.0.1/8"], "eth0": ["10.78.112.36/24"], "eth1": ["10.78.111.11/24"]}
    # the cluster network is the one Vagrant does not log in through
    assert choose_interface(machines[0], found, None) == ("eth1", "10.78.111.11")
    assert choose_interface(machines[0], found, "eth0") == ("eth0", "10.78.112.36")
    with pytest.raises(UserError, match="node1 has no IPv4 address on eth7 .*: fix --netdev"):
        choose_interface(machines[0], found, "eth7")
    with pytest.raises(UserError, match="node1 has several networks .*: name the cluster's with --netdev"):
        choose_interface(machines[0], {**found, "eth2": ["10.9.9.9/24"]}, None)

    machine = Machine(machines[0], parse_host_keys(keys), "eth1", "10.78.111.11", 22)
    assert known_hosts_lines([machine])[1].startswith("10.78.111.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDsvW")
    data = inventory_data([machine], "vagrant.known_hosts")
    assert data["defaults"]["rdma"] == {"netdevs": ["eth1"], "devices": ["rxe0"]}
    assert data["groups"]["nodes"]["hosts"]["node1"] == {
        "address": "10.78.111.11",
        "ssh": {"key": machines[0].identity},
    }


def test_every_lab_inventory_gates_softroce_with_the_labs_own_settings(tmp_path):
    """`lab up`, `lab vagrant-inventory` and inventories/lab.yaml share one set of gate settings:
    with the fabric's defaults a healthy SoftRoCE lab fails (no latency default for SoftRoCE;
    rails held to a fraction of the rxe port rate). `lab up`'s inventory and inventories/lab.yaml
    name one cluster, so either keeps the same baselines."""
    from rdmaprov.health.gates.latency import latency_limit
    from rdmaprov.lab.gates import LAB_P99_US, softroce_gates
    from rdmaprov.lab.vagrant import Machine, inventory_data
    from rdmaprov.parsers.vagrant import parse_ssh_config

    [ssh, _] = parse_ssh_config((VAGRANT / "ssh_config_2_machines.txt").read_text())
    vagrant = inventory_data([Machine(ssh, [], "eth1", "10.78.111.11", 22)], "vagrant.known_hosts")
    shipped = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    assert vagrant["cluster"]["gates"] == softroce_gates("eth1")
    assert shipped["cluster"]["gates"] == softroce_gates("eth0")
    lab = Lab(tmp_path)
    write_inventory(lab, LabSettings(), [Node("node1", "10.77.0.11", 24, "vm", str(tmp_path))], "10.77.0.1")
    written = yaml.safe_load(lab.inventory.read_text())
    assert written["cluster"]["name"] == shipped["cluster"]["name"] == "lab"
    assert written["cluster"]["gates"] == shipped["cluster"]["gates"]
    gates = gates_config(vagrant["cluster"]["gates"])
    assert latency_limit(gates.latency, "softroce") == (LAB_P99_US, "gates.latency.max_p99_us")
    assert gates.rail.min_gbps == gates.ib_write_bw.min_gbps == 0.01 and gates.rail.enabled


def test_an_unreadable_vagrant_ssh_config_line_is_named():
    from rdmaprov.parsers.vagrant import parse_ssh_config

    with pytest.raises(ValueError, match=r'^line 2: No closing quotation: IdentityFile "/home/a b/key$'):
        parse_ssh_config('Host node1\n  IdentityFile "/home/a b/key\n')
