"""The lab end to end: VMs reach PORT_ACTIVE through rdmaprov's own deploys and move RDMA traffic;
16 containers answer SSH; `lab down` leaves nothing behind; bad input gets clear errors."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import pytest

from tests.conftest import rdmaprov, rdmaprov_json

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def test_vm_lab_softroce_apply_is_idempotent_and_moves_rdma_traffic(vm_lab):
    assert "lab up: 2 vm nodes" in vm_lab.up_output
    code, first = rdmaprov_json("apply", vm_lab.inventory, timeout=900)
    assert code == 2, json.dumps(first, indent=1)[:3000]
    assert all(h["status"] == "changed" for h in first["hosts"])

    for node in ("node1", "node2"):
        devinfo = vm_lab.ssh(node, "ibv_devinfo -d rxe0").stdout
        assert "PORT_ACTIVE" in devinfo and "link_layer:\t\tEthernet" in devinfo
        # packages came from the lab mirror only: every other source was set aside
        sources = vm_lab.ssh(node, "cat /etc/apt/sources.list.d/*.list; ls /etc/apt").stdout
        assert re.search(r"deb \[signed-by=/etc/apt/keyrings/rdmaprov-mirror.asc\] http://10\.78\.\d+\.1:8079/debian bookworm main", sources)
        assert "sources.list.rdmaprov-disabled" in sources
        assert vm_lab.ssh(node, "systemctl is-enabled rdmaprov-rxe.service").stdout.strip() == "enabled"

    code, second = rdmaprov_json("apply", vm_lab.inventory, timeout=600)
    assert code == 0, [(h["name"], [o["name"] for o in h["ops"] if o["status"] != "unchanged"]) for h in second["hosts"]]
    assert sum(h["changed"] for h in second["hosts"]) == 0

    server_out: dict[str, subprocess.CompletedProcess] = {}
    server = threading.Thread(target=lambda: server_out.setdefault("p", vm_lab.ssh("node1", "timeout -k 5 90 ib_write_bw -d rxe0 -x 1 -D 3 -F")))
    server.start()
    for _ in range(60):  # wait until the server listens on perftest's port before the client dials
        if ":18515" in vm_lab.ssh("node1", "ss -tln").stdout:
            break
        time.sleep(1)
    client = vm_lab.ssh("node2", f"timeout -k 5 60 ib_write_bw -d rxe0 -x 1 -D 3 -F {vm_lab.subnet.rsplit('.', 1)[0]}.11")
    server.join(120)
    assert client.returncode == 0, client.stdout + client.stderr
    assert re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+[\d.]+", client.stdout, re.M), client.stdout
    assert server_out["p"].returncode == 0, server_out["p"].stderr


def test_sixteen_containers_answer_ssh_and_down_leaves_nothing(tmp_path):
    from tests.support.lab import TestLab

    lab = TestLab(tmp_path, "container", 16, "c")
    try:
        lab.up()
        status = rdmaprov("lab", "--dir", str(lab.dir), "status", "--json")
        rows = json.loads(status.stdout)
        assert len(rows) == 16 and all(r["running"] and r["ssh"] for r in rows)
        for node in ("node1", "node16"):
            proc = lab.ssh(node, "hostname")
            assert proc.returncode == 0 and proc.stdout.strip() == node
    finally:
        down = lab.down()
    assert down.returncode == 0
    assert lab.leftovers() == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "0"], "--nodes 0: a lab needs at least 1 node"),
        (["--subnet", "8.8.8.0/24"], "the lab needs a private range"),
        (["--subnet", "10.77.0.0/33"], "--subnet 10.77.0.0/33"),
    ],
)
def test_lab_up_bad_input(tmp_path, args, message):
    proc = rdmaprov("lab", "--dir", str(tmp_path / "lab"), "up", *args)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_lab_up_refuses_subnet_in_use(ssh_farm, tmp_path):
    used = f"{ssh_farm.subnet}.0/24"
    proc = rdmaprov("lab", "--dir", str(tmp_path / "lab"), "up", "--subnet", used, "--bridge", "rdtbusy")
    assert proc.returncode == 1
    assert f"lab subnet {used} is already in use on {ssh_farm.bridge}" in proc.stderr


def test_lab_up_without_qemu_says_what_to_install(tmp_path, monkeypatch):
    env_path = str(tmp_path)  # a PATH with no qemu on it
    for tool in ("ip", "ssh-keygen", "gpg", "apt-ftparchive"):
        src = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (tmp_path / tool).symlink_to(src)
    import os
    import sys

    proc = subprocess.run([sys.executable, "-m", "rdmaprov", "lab", "--dir", str(tmp_path / "lab"), "up"], capture_output=True, text=True, env=dict(os.environ, PATH=env_path))
    assert proc.returncode == 1
    assert "apt-get install qemu-system-x86 qemu-utils" in proc.stderr
