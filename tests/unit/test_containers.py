"""The containers section and what its deploy writes for podman."""

from __future__ import annotations

import pytest

from rdmaprov.deploys import STACK
from rdmaprov.deploys.containers import render_containers_conf
from rdmaprov.inventory.containers import ContainerConfig
from rdmaprov.packages import lab_packages
from rdmaprov.quoting import toml_string
from tests.support.inventories import defaults_problems, node_config


def _conf(settings: dict) -> dict:
    """The drop-in read back as podman reads it: TOML (Python reads it from 3.11 on)."""
    tomllib = pytest.importorskip("tomllib")
    node = node_config(settings)
    env, _ = node.nccl_environment()
    return tomllib.loads(render_containers_conf(node.containers, env))["containers"]


def test_off_unless_asked_for():
    assert node_config({}).containers == ContainerConfig("none", "host", None)
    assert not node_config({}).containers.enabled
    assert "containers" in STACK and "podman" in lab_packages()


def test_every_container_gets_the_rdma_devices_memlock_host_network_and_the_nccl_environment():
    conf = _conf({"fabric": "softroce", "containers": {"runtime": "podman"}, "nccl": {"env": {"NCCL_DEBUG": "WARN"}}})
    assert conf == {
        "devices": ["/dev/infiniband"],
        "default_ulimits": ["memlock=-1:-1"],
        "netns": "host",
        "ipcns": "host",
        "env": ["NCCL_DEBUG=WARN", "NCCL_IB_GID_INDEX=1", "NCCL_IB_HCA=rxe"],
    }


def test_a_private_ipc_namespace_gets_a_shared_memory_size():
    assert _conf({"containers": {"runtime": "podman", "ipc": "private"}})["shm_size"] == "8g"
    assert _conf({"containers": {"runtime": "podman", "ipc": "private", "shm_size": "16g"}})["shm_size"] == "16g"


def test_nccl_values_reach_podman_exactly_as_written():
    odd = 'a "quoted" \\ value'
    conf = _conf({"containers": {"runtime": "podman"}, "nccl": {"env": {"NCCL_SOCKET_IFNAME": odd}}})
    assert f"NCCL_SOCKET_IFNAME={odd}" in conf["env"]
    with pytest.raises(ValueError, match="control character"):
        toml_string("a\nb", "NCCL variable")


def test_a_shared_memory_size_that_would_never_be_used_is_refused(tmp_path):
    inventory, found = defaults_problems(tmp_path, "  containers: {runtime: podman, shm_size: 16g}\n")
    assert len(found) == 1
    assert f"{inventory}:3:" in found[0] and "defaults.containers.shm_size" in found[0]
    assert "with ipc: host containers use the node's" in found[0]
    assert "(fix: set containers.ipc: private, or drop shm_size)" in found[0]


@pytest.mark.parametrize(
    ("section", "words"),
    [("{runtime: docker}", "runtime"), ("{runtime: podman, ipc: private, shm_size: 8x}", "shm_size")],
)
def test_unknown_runtimes_and_sizes_are_refused(tmp_path, section, words):
    _, found = defaults_problems(tmp_path, f"  containers: {section}\n")
    assert len(found) == 1 and f"containers.{words}" in found[0], found
