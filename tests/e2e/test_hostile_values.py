"""Hostile inventory values through the real deploys onto real SSH hosts: the files hold them
verbatim, login shells read them back exactly, and no command hidden in them ever runs; values
that cannot be written safely are refused by validation before any host is touched."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import pytest

from tests.conftest import rdmaprov, rdmaprov_json

pytestmark = pytest.mark.e2e

TAGS = ("--tags", "limits,nccl_env", "--skip-verify")


def _env_yaml(env: dict[str, str]) -> str:
    # JSON strings are YAML double-quoted strings: the values arrive byte for byte.
    return "defaults:\n  fabric: roce\n  rdma: {devices: [mlx5_0]}\n  nccl:\n    env:\n" + "".join(
        f"      {key}: {json.dumps(value)}\n" for key, value in env.items()
    )


def test_hostile_nccl_values_reach_nodes_verbatim_and_run_nothing(ssh_farm, tmp_path):
    marker = f"/tmp/rdmaprov-owned-{uuid.uuid4().hex[:8]}"
    env = {
        "NCCL_A": f"x'; touch {marker}-a; '",
        "NCCL_B": f"$(touch {marker}-b)",
        "NCCL_C": f"`touch {marker}-c`",
        "NCCL_D": 'a"b\\c $HOME ${PATH} %h &|<>;',
        "NCCL_SOCKET_IFNAME": "=eth0",
    }
    inv = ssh_farm.inventory(tmp_path / "hostile.yaml", _env_yaml(env))
    code, result = rdmaprov_json("apply", str(inv), *TAGS)
    assert code == 2, result
    assert all(h["status"] == "changed" for h in result["hosts"])

    read_back = "printf '%s\\0' " + " ".join(f'"${k}"' for k in env)
    for host in ssh_farm.hosts:
        conf = ssh_farm.ssh(host, "cat /etc/nccl.conf").stdout.splitlines()
        for key, value in env.items():
            assert f"{key}={value}" in conf, (host.name, conf)
        login = ssh_farm.ssh(host, f"bash -lc {shlex.quote(read_back)}")
        assert login.returncode == 0, login.stderr
        assert login.stdout.split("\0")[:-1] == list(env.values())
        assert ssh_farm.ssh(host, f"ls {marker}-* 2>/dev/null | wc -l").stdout.strip() == "0"
    assert not list(Path("/tmp").glob(Path(marker).name + "-*"))

    code, again = rdmaprov_json("apply", str(inv), *TAGS)
    assert code == 0 and all(h["changed"] == 0 for h in again["hosts"])


def test_a_value_that_cannot_be_written_safely_touches_no_host(ssh_farm, tmp_path):
    inv = ssh_farm.inventory(tmp_path / "safe.yaml", _env_yaml({"NCCL_DEBUG": "WARN"}))
    assert rdmaprov("apply", str(inv), *TAGS).returncode in (0, 2)
    before = {h.name: ssh_farm.ssh(h, "cat /etc/nccl.conf /etc/profile.d/nccl.sh").stdout for h in ssh_farm.hosts}

    bad = ssh_farm.inventory(tmp_path / "bad.yaml", _env_yaml({"NCCL_DEBUG": "WARN\ntouch /tmp/x\n"}))
    proc = rdmaprov("apply", str(bad), *TAGS)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "defaults.nccl.env.NCCL_DEBUG: the value 'WARN\\ntouch /tmp/x\\n' contains a newline" in proc.stderr
    assert {
        h.name: ssh_farm.ssh(h, "cat /etc/nccl.conf /etc/profile.d/nccl.sh").stdout for h in ssh_farm.hosts
    } == before
