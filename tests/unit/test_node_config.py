"""Pure logic of the deploys: NCCL environment, memlock values, package sets, parsers."""

from __future__ import annotations

import pytest

from rdmaprov.deploys.limits import memlock_value
from rdmaprov.deploys.nccl_env import render_nccl_conf
from rdmaprov.inventory.derived import nccl_environment
from rdmaprov.deploys.package_sources import apt_source_line, yum_repo
from rdmaprov.deploys.rdma_userspace import rdma_package_sets
from rdmaprov.deploys.softroce import render_script, rxe_links
from rdmaprov.inventory.model import fill_defaults, node_schema
from rdmaprov.operations.packages import install_command
from rdmaprov.parsers.rdma import RdmaLink, parse_rdma_link, parse_rdma_system
from rdmaprov.parsers.system import parse_installed_packages, parse_os_release
from tests.conftest import FIXTURES
from tests.support.ops import APT_INSTALL


def test_defaults_do_not_invent_optional_sections():
    schema, root = node_schema()
    node = fill_defaults({}, schema, root)
    assert "apt" not in node.get("mirror", {})  # mirror.apt needs a url: only when written
    assert node["limits"] == {"memlock": "unlimited"}
    assert node["rdma"]["storage_hcas"] == []


def test_nccl_env_fabric_defaults():
    assert nccl_environment({"fabric": "erdma", "rdma": {}})[0] == {"NCCL_IB_GID_INDEX": "1", "NCCL_IB_HCA": "erdma"}
    assert nccl_environment({"fabric": "softroce", "rdma": {}})[0] == {"NCCL_IB_GID_INDEX": "1", "NCCL_IB_HCA": "rxe"}
    env, warnings = nccl_environment({"fabric": "infiniband", "rdma": {"devices": ["mlx5_0", "mlx5_1"]}})
    assert env == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"} and warnings == []


def test_nccl_env_never_gives_a_storage_hca_to_nccl():
    node = {"fabric": "infiniband", "rdma": {"devices": ["mlx5_0", "mlx5_1", "mlx5_8"], "storage_hcas": ["mlx5_8"]}, "nccl": {"env": {"NCCL_IB_HCA": "mlx5"}}}
    env, warnings = nccl_environment(node)
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert warnings == ["NCCL_IB_HCA=mlx5 matched storage HCA(s) mlx5_8; wrote =mlx5_0,mlx5_1 instead"]
    with pytest.raises(ValueError, match="declare rdma.devices"):
        nccl_environment({"fabric": "infiniband", "rdma": {"storage_hcas": ["mlx5_8"]}, "nccl": {"env": {"NCCL_IB_HCA": "mlx5"}}})
    # an exclusion list is left as the user wrote it
    assert nccl_environment({"fabric": "roce", "rdma": {"storage_hcas": ["mlx5_8"]}, "nccl": {"env": {"NCCL_IB_HCA": "^mlx5_8"}}})[0]["NCCL_IB_HCA"] == "^mlx5_8"


def test_nccl_conf_rendering_is_sorted_and_stable():
    text = render_nccl_conf({"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "rxe"})
    assert text.splitlines()[1:] == ["NCCL_DEBUG=WARN", "NCCL_IB_HCA=rxe"]


def test_memlock():
    assert memlock_value({"limits": {"memlock": "unlimited"}}) == ("unlimited", "infinity")
    assert memlock_value({"limits": {"memlock": 1048576}}) == ("1048576", str(1048576 * 1024))


def test_package_sets_and_install_commands():
    sets = rdma_package_sets({"packages": {"extra": ["htop"]}})
    assert sets["debian"][0] == "rdma-core" and sets["debian"][-1] == "htop"
    assert "libibverbs-utils" in sets["rhel"]
    assert rdma_package_sets({"packages": {"rdma": ["mlnx-ofed-all"], "extra": []}}) == {"debian": ["mlnx-ofed-all"], "rhel": ["mlnx-ofed-all"]}
    assert install_command("debian", ["rdma-core", "perftest"]) == APT_INSTALL + "rdma-core perftest"
    assert install_command("rhel", ["rdma-core"], "9") == "dnf install -y rdma-core"
    assert install_command("rhel", ["rdma-core"], "7") == "yum install -y rdma-core"


def test_mirror_sources():
    apt = {"url": "http://10.77.0.1:8079/debian", "components": ["main"]}
    assert apt_source_line(apt, "bookworm", True) == "deb [signed-by=/etc/apt/keyrings/rdmaprov-mirror.asc] http://10.77.0.1:8079/debian bookworm main\n"
    assert "gpgcheck=0" in yum_repo({"baseurl": "http://m/rocky9"})


def test_softroce_script():
    links = rxe_links(["eth0", "eth1"])
    assert links == [("rxe0", "eth0"), ("rxe1", "eth1")]
    assert "rdma link show rxe1/1 >/dev/null 2>&1 || rdma link add rxe1 type rxe netdev eth1" in render_script(links)


def test_parse_rdma_link_and_system_real_outputs():
    assert parse_rdma_link("link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 \n") == [RdmaLink("rxe0", 1, "ACTIVE", "LINK_UP", "eth0")]
    shared = (FIXTURES / "seed/rdma_system_show_shared.txt").read_text()
    exclusive = (FIXTURES / "seed/rdma_system_show_exclusive.txt").read_text()
    assert parse_rdma_system(shared)["netns"] == "shared"
    assert parse_rdma_system(exclusive)["netns"] == "exclusive"


def test_parse_os_release_and_packages():
    debian = parse_os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    assert (debian.family, debian.codename, debian.major) == ("debian", "bookworm", "12")
    alinux = parse_os_release('ID="alinux"\nID_LIKE="rhel fedora centos anolis"\nVERSION_ID="3"\n')
    assert alinux.family == "rhel"
    assert parse_os_release("ID=gentoo\n").family is None
    assert parse_installed_packages("ii  rdma-core\nrc  old-pkg\nii  libc6:amd64\n") == {"rdma-core", "libc6"}
    assert parse_installed_packages("rdma-core\nlibibverbs\n") == {"rdma-core", "libibverbs"}
