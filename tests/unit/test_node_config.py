"""Pure logic of the deploys: NCCL environment, memlock values, package sets, parsers."""

from __future__ import annotations

import dataclasses

import pytest

from rdmaprov.deploys.limits import memlock_value
from rdmaprov.deploys.nccl_env import render_nccl_conf
from rdmaprov.deploys.package_sources import apt_source_line, yum_repo
from rdmaprov.deploys.rdma_userspace import rdma_package_sets
from rdmaprov.deploys.softroce import render_script
from rdmaprov.inventory.config import plain, rxe_links
from rdmaprov.inventory.model import fill_defaults, node_schema
from rdmaprov.operations.packages import install_command
from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link, parse_rdma_system
from rdmaprov.parsers.system import parse_installed_packages, parse_os_release
from tests.conftest import FIXTURES
from tests.support.inventories import gates_config, node_config
from tests.support.ops import APT_INSTALL


def test_defaults_do_not_invent_optional_sections():
    schema, root = node_schema()
    node = fill_defaults({}, schema, root)
    assert "apt" not in node.get("mirror", {})  # mirror.apt needs a url: only when written
    assert node["limits"] == {"memlock": "unlimited"}
    assert node["rdma"]["storage_hcas"] == []


def test_nccl_env_fabric_defaults():
    assert node_config({"fabric": "erdma", "rdma": {}}).nccl_environment()[0] == {
        "NCCL_IB_GID_INDEX": "1",
        "NCCL_IB_HCA": "erdma",
    }
    assert node_config({"fabric": "softroce", "rdma": {}}).nccl_environment()[0] == {
        "NCCL_IB_GID_INDEX": "1",
        "NCCL_IB_HCA": "rxe",
    }
    env, warnings = node_config({"fabric": "infiniband", "rdma": {"devices": ["mlx5_0", "mlx5_1"]}}).nccl_environment()
    assert env == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"} and warnings == []


def test_nccl_env_never_gives_a_storage_hca_to_nccl():
    node = {
        "fabric": "infiniband",
        "rdma": {"devices": ["mlx5_0", "mlx5_1", "mlx5_8"], "storage_hcas": ["mlx5_8"]},
        "nccl": {"env": {"NCCL_IB_HCA": "mlx5"}},
    }
    env, warnings = node_config(node).nccl_environment()
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert warnings == ["NCCL_IB_HCA=mlx5 matched storage HCA(s) mlx5_8; wrote =mlx5_0,mlx5_1 instead"]
    with pytest.raises(ValueError, match="declare rdma.devices"):
        node_config(
            {"fabric": "infiniband", "rdma": {"storage_hcas": ["mlx5_8"]}, "nccl": {"env": {"NCCL_IB_HCA": "mlx5"}}}
        ).nccl_environment()
    # an exclusion list is left as the user wrote it
    assert (
        node_config(
            {"fabric": "roce", "rdma": {"storage_hcas": ["mlx5_8"]}, "nccl": {"env": {"NCCL_IB_HCA": "^mlx5_8"}}}
        ).nccl_environment()[0]["NCCL_IB_HCA"]
        == "^mlx5_8"
    )


def test_nccl_conf_rendering_is_sorted_and_stable():
    text = render_nccl_conf({"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "rxe"})
    assert text.splitlines()[1:] == ["NCCL_DEBUG=WARN", "NCCL_IB_HCA=rxe"]


def test_memlock():
    assert memlock_value(node_config({}).memlock) == ("unlimited", "infinity")
    assert memlock_value(node_config({"limits": {"memlock": 1048576}}).memlock) == ("1048576", str(1048576 * 1024))


def test_package_sets_and_install_commands():
    sets = rdma_package_sets(node_config({"packages": {"extra": ["htop"]}}).packages)
    assert sets["debian"][0] == "rdma-core" and sets["debian"][-1] == "htop"
    assert "libibverbs-utils" in sets["rhel"]
    assert rdma_package_sets(node_config({"packages": {"rdma": ["mlnx-ofed-all"], "extra": []}}).packages) == {
        "debian": ["mlnx-ofed-all"],
        "rhel": ["mlnx-ofed-all"],
    }
    assert install_command("debian", ["rdma-core", "perftest"]) == APT_INSTALL + "rdma-core perftest"
    assert install_command("rhel", ["rdma-core"], "9") == "dnf install -y rdma-core"
    assert install_command("rhel", ["rdma-core"], "7") == "yum install -y rdma-core"


def test_mirror_sources():
    apt = node_config({"mirror": {"apt": {"url": "http://10.77.0.1:8079/debian"}}}).apt_mirror
    assert (
        apt_source_line(apt, "bookworm", True)
        == "deb [signed-by=/etc/apt/keyrings/rdmaprov-mirror.asc] http://10.77.0.1:8079/debian bookworm main\n"
    )
    assert "gpgcheck=0" in yum_repo(node_config({"mirror": {"yum": {"baseurl": "http://m/rocky9"}}}).yum_mirror)


def test_softroce_script():
    links = rxe_links(["eth0", "eth1"])
    assert links == [("rxe0", "eth0"), ("rxe1", "eth1")]
    assert "rdma link show rxe1/1 >/dev/null 2>&1 || rdma link add rxe1 type rxe netdev eth1" in render_script(links)


def test_parse_rdma_link_and_system_real_outputs():
    assert parse_rdma_link("link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 \n") == [
        RdmaLink("rxe0", 1, "ACTIVE", "LINK_UP", "eth0")
    ]
    shared = (FIXTURES / "seed/rdma_system_show_shared.txt").read_text()
    exclusive = (FIXTURES / "seed/rdma_system_show_exclusive.txt").read_text()
    assert parse_rdma_system(shared)["netns"] == "shared"
    assert parse_rdma_system(exclusive)["netns"] == "exclusive"


def test_parse_os_release_and_packages():
    debian = parse_os_release(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'
    )
    assert (debian.family, debian.codename, debian.major) == ("debian", "bookworm", "12")
    alinux = parse_os_release('ID="alinux"\nID_LIKE="rhel fedora centos anolis"\nVERSION_ID="3"\n')
    assert alinux.family == "rhel"
    assert parse_os_release("ID=gentoo\n").family is None
    assert parse_installed_packages("ii  rdma-core\nrc  old-pkg\nii  libc6:amd64\n") == {"rdma-core", "libc6"}
    assert parse_installed_packages("rdma-core\nlibibverbs\n") == {"rdma-core", "libibverbs"}


def test_the_typed_model_takes_every_default_from_the_schema():
    node = node_config({})
    # defaults written beside a $ref in the schema (nccl.prefix, nccl.tests.prefix) are filled too
    assert (node.nccl.prefix, node.nccl.tests_prefix) == ("/opt/nccl", "/opt/nccl-tests")
    assert node.nccl.all_reduce_perf == "/opt/nccl-tests/current/bin/all_reduce_perf"
    assert (node.rdma.port, node.mpi.source, node.erdma.mtu, node.exporter.listen) == (
        1,
        "distro",
        8500,
        "0.0.0.0:9879",
    )
    assert node.gpu is None and not node.nccl_wanted  # count 0: no GPU settings to act on
    gates = gates_config()
    assert (gates.ib_write_bw.pairs, gates.ib_write_bw.size, gates.all_reduce.max_bytes) == ("ring", 65536, "512M")


def test_the_node_model_is_read_only():
    node = node_config(
        {"nccl": {"env": {"NCCL_DEBUG": "WARN"}}, "builds": [{"name": "x", "version": "1", "build": "make"}]}
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.fabric = "roce"  # type: ignore[misc]
    with pytest.raises(TypeError):
        node.nccl.env["NCCL_DEBUG"] = "TRACE"  # type: ignore[index]
    assert plain(node.builds[0]) == {"name": "x", "version": "1", "build": "make"}


def test_mpi_prefix_and_gid_index_derivations():
    prefixed = node_config({"mpi": {"source": "prefix", "prefix": "/opt/hpcx/ompi/"}})
    assert (prefixed.mpi.install_prefix, prefixed.mpi.mpicc) == ("/opt/hpcx/ompi", "/opt/hpcx/ompi/bin/mpicc")
    assert node_config({}).mpi.mpicc == "mpicc"
    assert node_config({"fabric": "roce"}).gid_index == 3
    assert node_config({"fabric": "roce", "rdma": {"gid_index": 1}}).gid_index == 1
    assert (
        node_config({"fabric": "roce", "rdma": {"gid_index": 1}, "nccl": {"env": {"NCCL_IB_GID_INDEX": "5"}}}).gid_index
        == 5
    )
    assert node_config({"fabric": "infiniband"}).gid_index is None
