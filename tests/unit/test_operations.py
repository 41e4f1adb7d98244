"""Operation-level tests: given a node's facts (for distros the lab cannot run), the exact commands;
given a converged node, no commands."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from rdmaprov.deploys.openmpi import mpi_package_sets
from rdmaprov.deploys.package_sources import YUM_REPO, yum_repo
from rdmaprov.deploys.rdma_userspace import rdma_package_sets
from rdmaprov.facts.files import BlockFile, BlockFileState, FileState, ManagedFile, PathExists
from rdmaprov.facts.rdma import RdmaLinks, RdmaSystem
from rdmaprov.facts.ssh import SshIdentityFact
from rdmaprov.facts.system import InstalledPackages, NetDevices, NetNamespaceCount, Os
from rdmaprov.inventory.config import YumMirror
from rdmaprov.operations.files import managed_block, managed_file
from rdmaprov.operations.mpi import mpirun_present
from rdmaprov.operations.network import mtu_now
from rdmaprov.operations.packages import packages
from rdmaprov.operations.rdma import netns_mode_live, rxe_links_present
from rdmaprov.operations.ssh import KNOWN_HOSTS, key_pair, known_hosts, trusted_keys
from rdmaprov.packages import CONTAINER_RUNTIMES, RDMA_USERSPACE, lab_packages
from rdmaprov.parsers.blocks import replace_block
from rdmaprov.parsers.rdma import RdmaLink
from rdmaprov.parsers.ssh import SshIdentity
from tests.support.inventories import node_config
from tests.support.ops import APT_INSTALL, commands, os_fact, run_notes

RHEL_RDMA = "rdma-core libibverbs libibverbs-utils librdmacm librdmacm-utils infiniband-diags perftest iproute"


@pytest.mark.parametrize(
    ("distro", "expected"),
    [
        ("ubuntu-22.04", APT_INSTALL + " ".join(RDMA_USERSPACE["debian"])),
        ("ubuntu-20.04", APT_INSTALL + " ".join(RDMA_USERSPACE["debian"])),
        ("rhel-8.9", f"dnf install -y {RHEL_RDMA}"),
        ("rocky-9.3", f"dnf install -y {RHEL_RDMA}"),
        ("alinux-3", f"dnf install -y {RHEL_RDMA}"),
        ("centos-7", f"yum install -y {RHEL_RDMA}"),
    ],
)
def test_rdma_userspace_commands_per_distro(distro, expected):
    facts = {Os: os_fact(distro), InstalledPackages: set()}
    assert commands(packages, facts, by_family=rdma_package_sets(node_config({}).packages)) == [expected]


@pytest.mark.parametrize("distro", ["ubuntu-22.04", "rhel-8.9", "alinux-3"])
def test_converged_packages_need_no_command(distro):
    os_info = os_fact(distro)
    installed = set(RDMA_USERSPACE[os_info.family])
    assert (
        commands(
            packages, {Os: os_info, InstalledPackages: installed}, by_family=rdma_package_sets(node_config({}).packages)
        )
        == []
    )


def test_only_missing_packages_are_installed_and_inventory_overrides():
    sets = rdma_package_sets(node_config({"packages": {"rdma": ["rdma-core", "perftest"], "extra": ["htop"]}}).packages)
    facts = {Os: os_fact("rhel-8.9"), InstalledPackages: {"rdma-core"}}
    assert commands(packages, facts, by_family=sets) == ["dnf install -y perftest htop"]


@pytest.mark.parametrize(
    ("distro", "expected"),
    [
        ("debian-12", APT_INSTALL + "docker.io apparmor dbus"),
        ("debian-13", APT_INSTALL + "docker.io apparmor dbus docker-cli"),
        ("ubuntu-22.04", APT_INSTALL + "docker.io apparmor dbus"),
        ("rocky-9.3", "dnf install -y docker-ce dbus"),
    ],
)
def test_docker_from_debian_13_on_brings_its_command_which_docker_io_only_recommends(distro, expected):
    facts = {Os: os_fact(distro), InstalledPackages: set()}
    assert commands(packages, facts, by_family=CONTAINER_RUNTIMES["docker"]) == [expected]
    assert ("docker-cli" in lab_packages("13"), "docker-cli" in lab_packages("12")) == (True, False)


def test_unknown_distro_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown distro 'Arch Linux' \(ID=arch\).*Debian/Ubuntu and RHEL-family"):
        commands(packages, {Os: os_fact("arch")}, by_family=RDMA_USERSPACE)


def test_openmpi_per_family_and_prefix():
    sets = mpi_package_sets(node_config({"mpi": {"source": "distro"}}).mpi)
    assert commands(packages, {Os: os_fact("rocky-9.3"), InstalledPackages: set()}, by_family=sets) == [
        "dnf install -y openmpi openmpi-devel gcc gcc-c++ make"
    ]
    assert mpi_package_sets(node_config({"mpi": {"source": "prefix", "prefix": "/opt/hpcx/ompi"}}).mpi) == {}
    assert (
        node_config({"mpi": {"source": "prefix", "prefix": "/opt/hpcx/ompi/"}}).mpi.install_prefix == "/opt/hpcx/ompi"
    )
    with pytest.raises(ValueError, match="mpi.prefix is not set"):
        _ = node_config({"mpi": {"source": "prefix"}}).mpi.install_prefix
    with pytest.raises(ValueError, match="/opt/hpcx/ompi/bin/mpirun does not exist on node1"):
        commands(mpirun_present, {PathExists: False}, prefix="/opt/hpcx/ompi")
    assert commands(mpirun_present, {PathExists: True}, prefix="/opt/hpcx/ompi") == []


def test_internal_yum_mirror_file_and_converged():
    repo = yum_repo(YumMirror("http://mirror.internal/rdma/el8", "http://mirror.internal/RPM-GPG-KEY", False))
    assert repo == (
        "[rdmaprov-mirror]\nname=rdmaprov internal mirror\nbaseurl=http://mirror.internal/rdma/el8\nenabled=1\n"
        "gpgcheck=1\ngpgkey=http://mirror.internal/RPM-GPG-KEY\n"
    )
    out = commands(managed_file, {ManagedFile: FileState(False)}, path=YUM_REPO, content=repo)
    assert out == [
        "mkdir -p /etc/yum.repos.d",
        f"upload {YUM_REPO}.rdmaprov-tmp:\n{repo}",
        f"chown root:root {YUM_REPO}.rdmaprov-tmp && chmod 644 {YUM_REPO}.rdmaprov-tmp && mv -f "
        f"{YUM_REPO}.rdmaprov-tmp {YUM_REPO}",
    ]
    converged = FileState(True, repo.encode(), "644", "root", "root")
    assert commands(managed_file, {ManagedFile: converged}, path=YUM_REPO, content=repo) == []


def test_mtu_commands_and_erdma_rule():
    assert node_config(
        {"fabric": "erdma", "rdma": {"netdevs": ["eth0"]}, "erdma": {"jumbo_frames": True}}
    ).wanted_mtus() == {"eth0": 8500}
    assert node_config(
        {"fabric": "erdma", "rdma": {"netdevs": ["eth0"]}, "erdma": {"jumbo_frames": False}}
    ).wanted_mtus() == {"eth0": 1400}
    assert node_config({"fabric": "roce", "mtu": {"ens1f0": 9000}}).wanted_mtus() == {"ens1f0": 9000}
    with pytest.raises(ValueError, match="mtu.eth0 is 9000 but eRDMA with jumbo frames needs 8500"):
        node_config(
            {"fabric": "erdma", "rdma": {"netdevs": ["eth0"]}, "mtu": {"eth0": 9000}, "erdma": {}}
        ).wanted_mtus()
    assert commands(mtu_now, {NetDevices: {"lo": 65536, "eth0": 1500}}, mtus={"eth0": 8500}) == [
        "ip link set dev eth0 mtu 8500"
    ]
    assert commands(mtu_now, {NetDevices: {"lo": 65536, "eth0": 8500}}, mtus={"eth0": 8500}) == []
    with pytest.raises(ValueError, match=r"netdev eth1 does not exist on node1 \(it has eth0, lo\)"):
        commands(mtu_now, {NetDevices: {"lo": 65536, "eth0": 1500}}, mtus={"eth1": 8500})


def test_netns_mode_live_switch_or_reboot():
    switch = {RdmaSystem: {"netns": "shared", "copy-on-fork": "on"}, NetNamespaceCount: 1}
    assert commands(netns_mode_live, switch, mode="exclusive") == ["rdma system set netns exclusive"]
    busy = {RdmaSystem: {"netns": "shared"}, NetNamespaceCount: 3}
    out, notes = run_notes(netns_mode_live, busy, mode="exclusive")
    assert out == []
    assert notes.reboots == {
        "node1": [
            "ib_core netns_mode is shared, wanted exclusive: 2 other network namespace(s) exist, so it cannot switch "
            "live"
        ]
    }
    assert commands(netns_mode_live, {RdmaSystem: {"netns": "exclusive"}}, mode="exclusive") == []
    assert commands(netns_mode_live, {RdmaSystem: {}}, mode="exclusive") == []  # ib_core not loaded


KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnode1"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnode2"
HOSTKEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhost1"
HOSTKEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhost2"
MARKER = "rdmaprov cluster lab"
# The SSH-trust operations' arguments for a two-node cluster.
TRUST = {"user": "root", "key_type": "ed25519", "cluster": ["node1", "node2"], "marker": MARKER}


def _ident(key: str | None, hostkey: str, hostname: str) -> SshIdentity:
    return SshIdentity(hostname=hostname, home="/root", user_key=key, host_keys=(hostkey,))


def test_key_pair_generated_on_the_node_only_when_missing():
    out = commands(key_pair, {SshIdentityFact: _ident(None, HOSTKEY1, "vm1")}, user="root", key_type="ed25519")
    assert out == [
        "install -d -m 700 -o root -g $(id -g root) /root/.ssh && ssh-keygen -q -t ed25519 -N '' -C rdmaprov@node1 -f "
        "/root/.ssh/id_ed25519 && chown root: /root/.ssh/id_ed25519 /root/.ssh/id_ed25519.pub"
    ]
    assert commands(key_pair, {SshIdentityFact: _ident(KEY1, HOSTKEY1, "vm1")}, user="root", key_type="ed25519") == []


def _uploaded(out: list[str]) -> str:
    upload = next(c for c in out if c.startswith("upload "))
    return upload.split("\n", 1)[1]


def test_authorized_keys_block_trusts_every_node_keeps_other_keys_and_revokes_removed():
    admin = "ssh-ed25519 AAAAadmin admin@laptop"
    old = f"{admin}\n# BEGIN {MARKER} (managed by rdmaprov)\nssh-ed25519 AAAAgone rdmaprov:node3\n# END {MARKER}\n"
    cluster = {SshIdentityFact: {"node1": _ident(KEY1, HOSTKEY1, "vm1"), "node2": _ident(KEY2, HOSTKEY2, "vm2")}}
    facts = {ManagedFile: FileState(True, old.encode(), "600", "root", "root")}
    out = commands(
        trusted_keys,
        facts,
        cluster_facts=cluster,
        **TRUST,
    )
    assert _uploaded(out) == (
        f"{admin}\n# BEGIN {MARKER} (managed by rdmaprov)\n{KEY1} rdmaprov:node1\n{KEY2} rdmaprov:node2\n# END "
        f"{MARKER}\n"
    )
    converged = FileState(True, _uploaded(out).encode(), "600", "root", "root")
    assert (
        commands(
            trusted_keys,
            {ManagedFile: converged},
            cluster_facts=cluster,
            **TRUST,
        )
        == []
    )


def test_unreached_node_keeps_its_entries_with_a_warning():
    block = f"# BEGIN {MARKER} (managed by rdmaprov)\n{KEY1} rdmaprov:node1\n{KEY2} rdmaprov:node2\n# END {MARKER}\n"
    cluster = {SshIdentityFact: {"node1": _ident(KEY1, HOSTKEY1, "vm1")}}
    facts = {ManagedFile: FileState(True, block.encode(), "600", "root", "root")}
    out, notes = run_notes(
        trusted_keys,
        facts,
        cluster_facts=cluster,
        **TRUST,
    )
    assert out == []
    assert notes.warnings == {"node1": ["SSH trust: node2 was not reached this run; kept its current entries"]}


def _block_read(tmp_path, text: str | None, marker: str = MARKER, mode: str = "600") -> BlockFileState:
    """The BlockFile fact's own command run by sh over a file holding `text` (None: no file)."""
    path = tmp_path / "file"
    path.unlink(missing_ok=True)
    if text is not None:
        path.write_bytes(text.encode())
    out = subprocess.run(["sh", "-c", BlockFile().command(str(path), marker)], capture_output=True, text=True)
    state = BlockFile().process(out.stdout.splitlines())
    return replace(state, mode=mode) if state.exists else state


@pytest.mark.parametrize(
    "text",
    [
        f"admin key\n# BEGIN {MARKER} (managed by rdmaprov)\nline 1\nline 2\n# END {MARKER}\nafter\n",
        f"# BEGIN {MARKER} (managed by rdmaprov)\nline 1\n",  # no END: the block runs to the end
        f"# BEGIN {MARKER} (managed by rdmaprov)\nline 1\n# END {MARKER}",  # no last newline
        "no block at all\n",
        f"# BEGIN {MARKER} (managed by rdmaprov)\na\n# END {MARKER}\n# BEGIN {MARKER} (managed by rdmaprov)\nb\n",
        "",
    ],
)
def test_a_block_file_read_without_its_block_decides_as_the_whole_file_would(tmp_path, text):
    """The node sends the file without the block's lines and the whole file's sha256: the block
    wanted, put into that rest, matches the sha256 exactly when it matches the whole file."""
    state = _block_read(tmp_path, text)
    assert len(state.outside) <= len(text.encode()) and b"line 1" not in state.outside
    for lines in (["line 1", "line 2"], ["line 1"], ["other"], []):
        wanted = replace_block(text, MARKER, lines)
        ops = commands(
            managed_block,
            {BlockFile: state, ManagedFile: FileState(True, text.encode(), "600", "root", "root")},
            path="/f",
            marker=MARKER,
            lines=lines,
            mode="600",
        )
        assert (ops == []) == (wanted == text), (lines, ops)


def test_a_converged_cluster_block_is_judged_by_its_digest_alone(tmp_path):
    """Every node's block holds every node's lines; a converged node sends only the rest of the
    file and a sha256, and the whole file is read only where it differs (for the diff)."""
    admin = "ssh-ed25519 AAAAadmin admin@laptop"
    cluster = {SshIdentityFact: {"node1": _ident(KEY1, HOSTKEY1, "vm1"), "node2": _ident(KEY2, HOSTKEY2, "vm2")}}
    block = f"# BEGIN {MARKER} (managed by rdmaprov)\n{KEY1} rdmaprov:node1\n{KEY2} rdmaprov:node2\n# END {MARKER}\n"
    converged = _block_read(tmp_path, admin + "\n" + block)
    assert b"AAAAadmin" in converged.outside and KEY1.encode() not in converged.outside
    # no ManagedFile given: reading it would find no file and upload one
    assert commands(trusted_keys, {BlockFile: converged}, cluster_facts=cluster, **TRUST) == []
    drifted = admin + "\n" + block.replace(f"{KEY2} rdmaprov:node2\n", "")
    out = commands(
        trusted_keys,
        {
            BlockFile: _block_read(tmp_path, drifted),
            ManagedFile: FileState(True, drifted.encode(), "600", "root", "root"),
        },
        cluster_facts=cluster,
        **TRUST,
    )
    assert _uploaded(out) == admin + "\n" + block


def test_known_hosts_pins_real_host_keys_by_name_address_and_hostname():
    cluster = {SshIdentityFact: {"node1": _ident(KEY1, HOSTKEY1, "vm1.lab"), "node2": _ident(KEY2, HOSTKEY2, "vm2")}}
    out = commands(
        known_hosts,
        {ManagedFile: FileState(False)},
        cluster_facts=cluster,
        user="root",
        key_type="ed25519",
        cluster=["node1", "node2"],
        addresses={"node1": "10.77.0.11", "node2": "10.77.0.12"},
        marker=MARKER,
    )
    assert _uploaded(out) == (
        f"# BEGIN {MARKER} (managed by rdmaprov)\n"
        f"node1,10.77.0.11,vm1.lab,vm1 {HOSTKEY1}\nnode2,10.77.0.12,vm2 {HOSTKEY2}\n# END {MARKER}\n"
    )
    assert out[-1].endswith(f"mv -f {KNOWN_HOSTS}.rdmaprov-tmp {KNOWN_HOSTS}")


def test_rxe_links_are_added_once_even_when_udev_renamed_one():
    links = [("rxe0", "eth0")]
    netdevs = {NetDevices: {"lo": 65536, "eth0": 1500}}
    assert commands(rxe_links_present, {**netdevs, RdmaLinks: []}, links=links) == [
        "rdma link add rxe0 type rxe netdev eth0"
    ]
    renamed = [RdmaLink("rocep0s8", 1, "ACTIVE", "LINK_UP", "eth0")]  # the netdev already has its link
    assert commands(rxe_links_present, {**netdevs, RdmaLinks: renamed}, links=links) == []
