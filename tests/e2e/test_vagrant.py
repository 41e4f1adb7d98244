"""The top-level Vagrantfile for real: a node of the box `rdmaprov lab box` makes, on libvirt with
QEMU emulation, an inventory from `rdmaprov lab vagrant-inventory` (host keys pinned), an apply
to SoftRoCE as the `vagrant` user through sudo, verified, a clean check, and `vagrant destroy`
leaving no domain, disk, network or process. One machine: two doubled the test's emulated CPU
beside the lab's (`vagrant up` alone took 694 s for two on CI's machine), and what a second adds
(its own host keys, made at first boot) is the lab image's first-boot unit, which every lab VM
runs; the multi-machine Vagrantfile took two machines until 2026-11-28.

The apply leaves out what the VM lab's tests already converge and run as root, and what costs most
under emulation: Open MPI with its compilers, the gate's probe built with them, and the gates
(on CI's two cores, beside the lab, they took minutes and once ran past the latency gate's
timeout). Every other deploy a SoftRoCE node gets runs through sudo; sudo is the engine's, the
same for every deploy.

The machines' networks are the test's own (private, not forwarded anywhere); packages come from
the lab's signed mirror served on the private network, as on an air-gapped cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rdmaprov.deploys import STACK
from rdmaprov.lab.vagrant import READ
from tests.conftest import REPO, rdmaprov, rdmaprov_json
from tests.support.lab import free_subnet
from tests.support.libvirt import Libvirtd, names, processes, virsh

pytestmark = [pytest.mark.e2e, pytest.mark.lab]

MIRROR_PORT = 8079
# every deploy but those the module's docstring says are left out (a deploy added later is in)
TAGS = ",".join(name for name in STACK if name not in ("openmpi", "gate_tools"))


def _vagrant(project: Path, env: dict[str, str], *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(["vagrant", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def _serve_mirror(lab_dir: Path, address: str) -> subprocess.Popen:
    """The lab's bookworm mirror, indexed and signed in lab_dir, served on the private network."""
    from rdmaprov.lab import mirror
    from rdmaprov.lab.image import ensure_image
    from rdmaprov.lab.releases import find_release

    bookworm = find_release("bookworm")
    pool = mirror.fetch_packages(ensure_image(bookworm), bookworm)
    mirror.build_repository(lab_dir, {"bookworm": pool})
    return mirror.serve(lab_dir, address, MIRROR_PORT)


@pytest.fixture
def vagrant_project(tmp_path):
    """A Vagrant project with the repository's Vagrantfile, a private VAGRANT_HOME holding the
    box made from the lab image, and a storage pool of its own; all removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("libvirt's system daemon needs root")
    daemon = Libvirtd().start()
    tag = f"rdv{os.getpid() % 10000}"
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "Vagrantfile", project / "Vagrantfile")
    # libvirt's QEMU runs as libvirt-qemu: the disks live where it may read them
    pool_dir = Path("/var/lib/libvirt/images") / tag
    pool_dir.mkdir(parents=True, exist_ok=True)
    virsh("pool-define-as", tag, "dir", "--target", str(pool_dir), check=True)
    virsh("pool-start", tag, check=True)
    private, management = free_subnet(), free_subnet(skip=1)
    env = dict(
        os.environ,
        VAGRANT_HOME=str(tmp_path / "vagrant.d"),
        VAGRANT_CHECKPOINT_DISABLE="1",
        NODES="1",
        RDMAPROV_BOX="rdmaprov/bookworm",
        LIBVIRT_DRIVER="qemu",
        SUBNET=private.rsplit(".", 1)[0],
        LIBVIRT_PREFIX=f"{tag}_",
        LIBVIRT_NETWORK=f"{tag}-private",
        LIBVIRT_MGMT_NETWORK=f"{tag}-mgmt",
        LIBVIRT_MGMT_SUBNET=management,
        LIBVIRT_MGMT_MODE="none",
        LIBVIRT_POOL=tag,
    )
    box = rdmaprov("lab", "box", timeout=1800)
    assert box.returncode == 0, box.stderr
    path = box.stdout.split("box: ", 1)[1].split()[0]
    added = _vagrant(project, env, "box", "add", "--name", "rdmaprov/bookworm", path, timeout=600)
    assert added.returncode == 0, added.stderr
    try:
        yield project, env, tag
    finally:
        _vagrant(project, env, "destroy", "-f", timeout=600)
        for volume in names("volume", "", pool=tag):
            virsh("vol-delete", "--pool", tag, volume)
        virsh("pool-destroy", tag)
        virsh("pool-undefine", tag)
        shutil.rmtree(pool_dir, ignore_errors=True)
        daemon.stop()


def test_vagrant_up_apply_check_and_destroy_on_libvirt(vagrant_project, tmp_path, monkeypatch):
    project, env, tag = vagrant_project
    # rdmaprov's own Vagrant calls (vagrant-inventory) run with the environment the machines
    # were brought up with, as the docs tell users to (NODES=1 against the Vagrantfile's 2)
    for name, value in env.items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)
    started = time.monotonic()
    up = _vagrant(project, env, "up", "--provider", "libvirt")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr
    up_s = time.monotonic() - started

    inventory = tmp_path / "vagrant.yaml"
    written = rdmaprov("lab", "vagrant-inventory", "--vagrant-dir", str(project), "-o", str(inventory), timeout=600)
    assert written.returncode == 0, written.stderr
    data = yaml.safe_load(inventory.read_text())
    subnet = env["SUBNET"]
    hosts = data["groups"]["nodes"]["hosts"]
    assert {name: h["address"] for name, h in hosts.items()} == {"node1": f"{subnet}.11"}
    assert data["defaults"]["rdma"] == {"netdevs": ["eth1"], "devices": ["rxe0"]}
    assert hosts["node1"]["ssh"]["key"].endswith(".vagrant/machines/node1/libvirt/private_key")
    # the keys pinned are the machine's own, as it shows them over `vagrant ssh` (outputs kept for the record)
    ssh_config = _vagrant(project, env, "ssh-config", timeout=300).stdout
    (tmp_path / "ssh-config.txt").write_text(ssh_config)
    assert f"IdentityFile {hosts['node1']['ssh']['key']}" in ssh_config
    pinned = (tmp_path / "vagrant.known_hosts").read_text().splitlines()
    shown = _vagrant(project, env, "ssh", "node1", "-c", READ, timeout=300).stdout
    (tmp_path / "read-node1.txt").write_text(shown)
    keys = [line.split()[:2] for line in shown.splitlines() if line.startswith("ssh-")]
    assert len(keys) >= 2 and all(f"{hosts['node1']['address']} {k[0]} {k[1]}" in pinned for k in keys), shown

    # packages from the lab's signed mirror on the private network: the machine reaches nothing else
    server = _serve_mirror(tmp_path / "mirror", f"{subnet}.1")
    try:
        url, key = f"http://{subnet}.1:{MIRROR_PORT}/debian", str(tmp_path / "mirror" / "mirror.asc")
        data["defaults"]["mirror"] = {"apt": {"url": url, "key": key, "exclusive": True}}
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.monotonic()
        code, result = rdmaprov_json("apply", str(inventory), "--tags", TAGS, "--skip-gates", timeout=2400)
        apply_s = time.monotonic() - started
        problems = [f for v in result.get("verify", []) for f in v["findings"] if not f["ok"]]
        failed_ops = [
            (h["name"], h["status"], h["error"], [o for o in h["ops"] if o["status"] == "failed"])
            for h in result["hosts"]
        ]
        statuses = [(v["name"], v["status"], v["error"]) for v in result.get("verify", [])]
        assert code == 2, (problems, failed_ops, statuses)
        assert [v["status"] for v in result["verify"]] == ["ok"]
        assert not result.get("gates"), result["gates"]
        devinfo = _vagrant(project, env, "ssh", "node1", "-c", "ibv_devinfo -d rxe0", timeout=300).stdout
        assert "PORT_ACTIVE" in devinfo and "link_layer:\t\tEthernet" in devinfo, devinfo
        check = rdmaprov("check", str(inventory), "--tags", TAGS, timeout=900)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"vagrant up {up_s:.0f}s, first apply {apply_s:.0f}s")  # shown with -s: the CI minutes this test adds

    started = time.monotonic()
    destroyed = _vagrant(project, env, "destroy", "-f", timeout=600)
    assert destroyed.returncode == 0, destroyed.stderr
    assert names("domain", tag) == [] and names("network", tag) == []
    # only the box's base image stays in the pool (Vagrant keeps it for the next `up`), no machine's disk
    assert [v for v in names("volume", "", pool=tag) if "vagrant_box_image" not in v] == []
    assert processes(f"{tag}_node", f"{tag}-private", f"{tag}-mgmt") == []
    assert time.monotonic() - started < 300
