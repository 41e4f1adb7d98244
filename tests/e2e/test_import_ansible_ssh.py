"""An Ansible inventory of real SSH hosts, imported and then used: `rdmaprov check` reaches every
host with the imported inventory (host keys pinned through --known-hosts), and the imported
groups select hosts with --limit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, rdmaprov, rdmaprov_json

pytestmark = pytest.mark.e2e

# The test hosts share this machine's packages and have no route out: plan the file-only deploys.
CHECK = ("--tags", "limits,nccl_env", "--skip-verify")


def _import(source, cwd, *args: str) -> subprocess.CompletedProcess:
    """`rdmaprov import ansible` run from `cwd`, as a DeepOps user runs it from their checkout."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run(
        [sys.executable, "-m", "rdmaprov", "import", "ansible", str(source), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def _statuses(result: dict) -> dict[str, str]:
    return {host["name"]: host["status"] for host in result["hosts"]}


def test_deepops_ini_inventory_imported_then_checked_on_real_hosts(ssh_farm, tmp_path):
    site = tmp_path / "deepops"
    (site / "config" / "group_vars").mkdir(parents=True)
    (site / "keys").mkdir()
    shutil.copy(ssh_farm.client_key, site / "keys" / "cluster_ed25519")  # a key path relative to the checkout
    login, *gpus = ssh_farm.hosts
    lines = ["[all]"] + [f"{h.name} ansible_host={h.address}" for h in ssh_farm.hosts]
    lines += ["", "[slurm-master]", login.name, "", "[slurm-node]", *(h.name for h in gpus)]
    lines += ["", "[slurm-cluster:children]", "slurm-master", "slurm-node", "", "[all:vars]", "ansible_user=root"]
    (site / "config" / "inventory").write_text("\n".join(lines) + "\n")
    (site / "config" / "group_vars" / "all.yml").write_text(
        "ansible_ssh_private_key_file: keys/cluster_ed25519\nslurm_version: 23.02.7\n"
    )
    out = tmp_path / "cluster.yaml"

    proc = _import("config/inventory", site, "-o", str(out), "--known-hosts", str(ssh_farm.known_hosts))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert f"key: {site}/keys/cluster_ed25519  # ansible_ssh_private_key_file" in text
    assert f"known_hosts: {ssh_farm.known_hosts}" in text
    assert '# ansible (group all): slurm_version: "23.02.7"' in text
    assert rdmaprov("validate", str(out)).returncode == 0

    code, result = rdmaprov_json("check", str(out), *CHECK, timeout=300)
    assert code in (0, 2), result  # drift or none: either way every host was reached and planned
    assert set(_statuses(result)) == {h.name for h in ssh_farm.hosts}
    assert set(_statuses(result).values()) <= {"changed", "unchanged"}, result
    assert result["cluster"] == "deepops"

    code, result = rdmaprov_json("check", str(out), *CHECK, "--limit", "slurm-node", timeout=300)
    assert code in (0, 2), result
    assert set(_statuses(result)) == {h.name for h in gpus}


def test_ansible_yaml_inventory_with_children_imported_then_checked(ssh_farm, tmp_path):
    first, second, third = ssh_farm.hosts
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("ansible_user: root\nnccl_debug: WARN\n")
    (tmp_path / "hosts.yml").write_text(
        f"""all:
  vars:
    ansible_ssh_private_key_file: {ssh_farm.client_key}
    ansible_user: root
  children:
    gpu:
      children:
        a100:
          hosts:
            {first.name}: {{ansible_host: {first.address}}}
        h100:
          hosts:
            {second.name}: {{ansible_ssh_host: {second.address}, ansible_port: 22}}
    login:
      hosts:
        {third.name}:
          ansible_host: {third.address}
"""
    )
    out = tmp_path / "cluster.yaml"
    proc = _import(tmp_path / "hosts.yml", tmp_path, "-o", str(out), "--known-hosts", str(ssh_farm.known_hosts))
    assert proc.returncode == 0, proc.stderr
    code, result = rdmaprov_json("check", str(out), *CHECK, "--limit", "gpu", timeout=300)
    assert code in (0, 2), result
    assert _statuses(result).keys() == {first.name, second.name}
    assert set(_statuses(result).values()) <= {"changed", "unchanged"}, result
