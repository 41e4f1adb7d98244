"""The node_check deploy on real SSH hosts: the zipapp, its command and the expectations reach the
nodes, node-check runs there on the bare python3, and a re-apply uploads nothing."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import rdmaprov_json

pytestmark = pytest.mark.e2e

SLURM_HEALTH_CHECK = {"enabled": True, "mode": "health_check", "node_names": {}}


def _inventory(farm, tmp_path) -> str:
    path = farm.inventory(tmp_path / "farm.yaml", "defaults:\n  fabric: roce\n  rdma:\n    devices: [mlx5_0]\n")
    data = yaml.safe_load(path.read_text())
    first = farm.hosts[0].name
    data["cluster"]["slurm"] = dict(SLURM_HEALTH_CHECK, node_names={first: "gpu-001"})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_node_check_is_shipped_runs_on_the_node_and_is_not_reuploaded(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path)
    code, first = rdmaprov_json("apply", inv, "--tags", "node_check", "--skip-verify")
    assert code == 2, first
    for host in first["hosts"]:
        ops = {op["name"]: op for op in host["ops"]}
        assert ops["node_check | node check program"]["status"] == "changed"
        assert any(
            c.startswith("upload /usr/local/lib/rdmaprov/node-check.pyz.rdmaprov-tmp")
            for c in ops["node_check | node check program"]["commands"]
        )
    node = ssh_farm.hosts[0]
    expected = json.loads(ssh_farm.ssh(node, "cat /etc/rdmaprov/node-check.json").stdout)
    assert expected["host"] == node.name and expected["slurm"]["node_name"] == "gpu-001"
    assert expected["node"]["rdma"]["devices"] == ["mlx5_0"]
    # the command runs on the node's own python3 with no site-packages: these hosts have no RDMA
    run = ssh_farm.ssh(node, "/usr/local/sbin/rdmaprov-node-check; echo exit=$?")
    lines = run.stdout.splitlines()
    assert lines[-1] == "exit=4", run.stdout + run.stderr
    assert "rdma.device_present mlx5_0: missing (expected present)" in lines
    assert ssh_farm.ssh(node, "stat -c '%a %U' /usr/local/sbin/rdmaprov-node-check").stdout.split() == ["755", "root"]

    code, second = rdmaprov_json("apply", inv, "--tags", "node_check", "--skip-verify")
    assert code == 0, [
        (h["name"], [o["name"] for o in h["ops"] if o["status"] != "unchanged"]) for h in second["hosts"]
    ]

    # Slurm off: the deploy takes everything away again
    data = yaml.safe_load(open(inv))
    data["cluster"]["slurm"]["enabled"] = False
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(data, sort_keys=False))
    code, removed = rdmaprov_json("apply", str(off), "--tags", "node_check", "--skip-verify")
    assert code == 2, removed
    gone = ssh_farm.ssh(node, "ls /usr/local/lib/rdmaprov/node-check.pyz /etc/rdmaprov/node-check.json 2>&1; true")
    assert gone.stdout.count("No such file") == 2
