"""The containers section and what its deploy writes: podman's drop-in, the CDI spec of the RDMA devices."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import yaml

from rdmaprov.deploys import STACK
from rdmaprov.deploys.containers import (
    CDI_SCRIPT,
    CDI_UDEV_RULE,
    ENROOT_FSTAB,
    cdi_script,
    docker_daemon_keys,
    node_script,
    rdma_netns_script,
    render_containers_conf,
    render_docker_run,
)
from rdmaprov.deploys.nccl_env import NCCL_CONF
from rdmaprov.inventory.containers import ContainerConfig
from rdmaprov.operations.files import merged_json
from rdmaprov.packages import lab_packages
from rdmaprov.quoting import toml_string
from tests.conftest import FIXTURES
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
    assert "containers" in STACK and {"podman", "docker.io"} <= set(lab_packages())


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
    [("{runtime: lxc}", "runtime"), ("{runtime: podman, ipc: private, shm_size: 8x}", "shm_size")],
)
def test_unknown_runtimes_and_sizes_are_refused(tmp_path, section, words):
    _, found = defaults_problems(tmp_path, f"  containers: {section}\n")
    assert len(found) == 1 and f"containers.{words}" in found[0], found


# --- docker: the job's `docker run`, and rdmaprov's keys in daemon.json ---------------------------


def _docker_run_words(tmp_path: Path, settings: dict, *job: str) -> list[str]:
    """The words rdmaprov-docker-run hands docker, as sh passes them: a `docker` first on PATH
    that prints each word it was given on a line of its own."""
    node = node_config(settings)
    env, _ = node.nccl_environment()
    script = tmp_path / "rdmaprov-docker-run"
    script.write_text(render_docker_run(node.containers, env, node.gpu is not None))
    script.chmod(0o755)
    (tmp_path / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (tmp_path / "docker").chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    proc = subprocess.run([str(script), *job], capture_output=True, text=True, env={**os.environ, "PATH": path})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_jobs_docker_run_gets_the_rdma_devices_memlock_host_network_and_the_nccl_environment(tmp_path):
    settings = {"fabric": "softroce", "containers": {"runtime": "docker"}, "nccl": {"env": {"NCCL_DEBUG": "WARN"}}}
    words = _docker_run_words(tmp_path, settings, "--rm", "img:1", "sh", "-c", "ulimit -l")
    assert words == [
        "run",
        "--network=host",
        "--device=/dev/infiniband",
        "--ulimit=memlock=-1:-1",
        "--ipc=host",
        "--env=NCCL_DEBUG=WARN",
        "--env=NCCL_IB_GID_INDEX=1",
        "--env=NCCL_IB_HCA=rxe",
        "--rm",
        "img:1",
        "sh",
        "-c",
        "ulimit -l",
    ]
    private = {"containers": {"runtime": "docker", "ipc": "private", "shm_size": "16g"}}
    words = _docker_run_words(tmp_path, private, "img")
    assert "--shm-size=16g" in words and "--ipc=host" not in words


def test_on_a_gpu_node_a_jobs_docker_run_gets_every_gpu_unless_it_asks_for_its_own(tmp_path):
    """Two --gpus would add up to every GPU: the job's own choice replaces rdmaprov's."""
    gpu_node = {"gpu": {"count": 8}, "containers": {"runtime": "docker"}}
    words = _docker_run_words(tmp_path, gpu_node, "img", "python", "train.py")
    assert words[-4:] == ["--gpus=all", "img", "python", "train.py"]
    for asked in (["--gpus", "device=3"], ["--gpus=2"]):
        words = _docker_run_words(tmp_path, gpu_node, *asked, "img")
        assert "--gpus=all" not in words and words[-len(asked) - 1 :] == [*asked, "img"], words
    assert "--gpus=all" not in _docker_run_words(tmp_path, {"containers": {"runtime": "docker"}}, "img")
    # the toolkit (and the CUDA repository it comes from) for a runtime on a GPU node, either runtime
    podman_gpu_node = {**gpu_node, "containers": {"runtime": "podman"}}
    assert node_config(gpu_node).container_gpus and node_config(podman_gpu_node).container_gpus
    assert not node_config({"gpu": {"count": 8}}).container_gpus
    assert not node_config({"containers": {"runtime": "docker"}}).container_gpus


def test_nccl_values_reach_docker_exactly_as_written(tmp_path):
    odd = "a 'quoted' \"$(id)\" \\ value"
    settings = {"containers": {"runtime": "docker"}, "nccl": {"env": {"NCCL_SOCKET_IFNAME": odd}}}
    assert f"--env=NCCL_SOCKET_IFNAME={odd}" in _docker_run_words(tmp_path, settings, "img")
    node = node_config({"containers": {"runtime": "docker"}, "nccl": {"env": {"NCCL_SOCKET_IFNAME": "a\nb"}}})
    with pytest.raises(ValueError, match="control character"):
        render_docker_run(node.containers, node.nccl_environment()[0])


NVIDIA_RUNTIME = """{
  "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
  "default-ulimits": {"nofile": {"Name": "nofile", "Soft": 65536, "Hard": 65536}}
}
"""


def test_daemon_json_gets_rdmaprovs_keys_and_keeps_everyone_elses():
    """nvidia-ctk's runtime and the site's own ulimit stay; memlock joins the site's ulimits."""
    keys = docker_daemon_keys(node_config({"containers": {"runtime": "docker", "ipc": "private"}}).containers)
    merged = yaml.safe_load(merged_json("/etc/docker/daemon.json", NVIDIA_RUNTIME, keys))
    assert merged["runtimes"] == {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    assert merged["default-ulimits"] == {
        "nofile": {"Name": "nofile", "Soft": 65536, "Hard": 65536},
        "memlock": {"Name": "memlock", "Soft": -1, "Hard": -1},
    }
    assert merged["default-shm-size"] == "8g"
    again = merged_json("/etc/docker/daemon.json", NVIDIA_RUNTIME.replace("\n", " "), keys)
    assert merged_json("/etc/docker/daemon.json", again, keys) == again  # converged: the text is left alone
    # runtime none takes rdmaprov's keys out again, and only those
    off = docker_daemon_keys(node_config({}).containers)
    assert yaml.safe_load(merged_json("/etc/docker/daemon.json", again, off)) == yaml.safe_load(NVIDIA_RUNTIME)


def test_daemon_json_that_only_rdmaprov_wrote_goes_with_its_keys():
    keys = docker_daemon_keys(node_config({"containers": {"runtime": "docker"}}).containers)
    ours = merged_json("/etc/docker/daemon.json", None, keys)
    assert yaml.safe_load(ours) == {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}
    assert merged_json("/etc/docker/daemon.json", ours, docker_daemon_keys(node_config({}).containers)) is None
    assert merged_json("/etc/docker/daemon.json", None, docker_daemon_keys(node_config({}).containers)) is None
    assert merged_json("/etc/docker/daemon.json", "{}\n", docker_daemon_keys(node_config({}).containers)) == "{}\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [('{"runtimes": {', "/etc/docker/daemon.json is not valid JSON"), ("[1]", "JSON that is not an object")],
)
def test_a_daemon_json_that_dockerd_could_not_read_either_is_refused_with_the_fix(text, words):
    keys = docker_daemon_keys(node_config({"containers": {"runtime": "docker"}}).containers)
    with pytest.raises(ValueError, match=words) as raised:
        merged_json("/etc/docker/daemon.json", text, keys)
    assert "then apply again" in str(raised.value)


# --- the CDI spec of the RDMA devices ----------------------------------------------------------

XDR = FIXTURES / "public" / "infiniband_mad_umad_issm_ibdev_port_xdr_smi_device.txt"


def _sysfs(root: Path, devices: dict[str, str], rdma_cm: bool = True) -> Path:
    """A sysfs of `devices` ({"infiniband_verbs/uverbs0": "mlx5_0"}): each one's ibdev file."""
    for node, ibdev in devices.items():
        (root / "class" / node).mkdir(parents=True, exist_ok=True)
        (root / "class" / node / "ibdev").write_text(ibdev + "\n")
    if rdma_cm:
        (root / "class" / "misc" / "rdma_cm").mkdir(parents=True, exist_ok=True)
    return root


def _lab() -> tuple[dict[str, str], bool]:
    """A lab VM's devices as captured (`grep -H` of each ibdev, then rdma_cm's sysfs directory)."""
    text = (FIXTURES / "lab" / "rdma_char_devices_rxe0_debian12.txt").read_text()
    found = (re.match(r"/sys/class/(\S+)/ibdev:(\S+)$", line) for line in text.splitlines())
    return {m[1]: m[2] for m in found if m}, "/sys/class/misc/rdma_cm" in text.splitlines()


def _xdr() -> dict[str, str]:
    """The published XDR node's umad/issm devices, by their sysfs names."""
    found = (re.match(r"(\w+) -> ibdev=(\S+) port=", line) for line in XDR.read_text().splitlines())
    return {f"infiniband_mad/{m[1]}": m[2] for m in found if m}


def _cdi_command(sysfs: Path, out: Path, nccl_conf: Path | None = None) -> list[str]:
    """The node's spec writer as udev and apply run it: the shipped script, by /bin/sh."""
    script = resources.files("rdmaprov.deploys").joinpath("cdi_rdma.sh")
    conf = ["--nccl-conf", str(nccl_conf or sysfs / "no-nccl.conf")]
    return ["sh", str(script), "--sys", str(sysfs), "--out", str(out), *conf]


def _cdi(sysfs: Path, out: Path, *args: str, nccl_conf: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*_cdi_command(sysfs, out, nccl_conf), *args], capture_output=True, text=True, timeout=30)


def _devices(out: Path) -> dict[str, list[str]]:
    spec = yaml.safe_load(out.read_text())
    assert spec["cdiVersion"] == "0.3.0" and spec["kind"] == "rdmaprov/rdma", spec
    return {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}


def test_the_cdi_spec_gives_each_hca_its_own_devices_and_all_of_them(tmp_path):
    """An XDR node as published (mlx5_0's umad0; smi1's four umad and issm ports), its uverbs
    added: one device per HCA with rdma_cm, and `all`, never an issm (a subnet manager's port);
    /etc/nccl.conf mounted for the image's NCCL."""
    sysfs = _sysfs(tmp_path / "sys", {**_xdr(), "infiniband_verbs/uverbs0": "mlx5_0"})
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_IB_HCA=mlx5_0\n")
    out = tmp_path / "cdi" / "rdmaprov-rdma.yaml"
    assert _cdi(sysfs, out, nccl_conf=conf).returncode == 0
    smi1 = [f"/dev/infiniband/{n}" for n in ("umad1", "umad2", "umad3", "umad4")]
    cm = "/dev/infiniband/rdma_cm"
    mlx5_0 = ["/dev/infiniband/umad0", "/dev/infiniband/uverbs0"]
    assert _devices(out) == {"mlx5_0": [*mlx5_0, cm], "smi1": [*smi1, cm], "all": [*mlx5_0, *smi1, cm]}
    mounts = yaml.safe_load(out.read_text())["containerEdits"]["mounts"]
    assert mounts == [{"hostPath": str(conf), "containerPath": "/etc/nccl.conf", "options": ["ro", "bind"]}]


def test_the_cdi_spec_follows_the_devices_and_check_says_when_it_does_not(tmp_path):
    sysfs = _sysfs(tmp_path / "sys", *_lab())
    out = tmp_path / "rdmaprov-rdma.yaml"
    stale = _cdi(sysfs, out, "--check")
    assert stale.returncode == 1 and f"{out} is not what {sysfs} gives now" in stale.stdout
    assert not out.exists()  # --check writes nothing
    rxe0 = ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]
    assert _cdi(sysfs, out).returncode == 0 and _devices(out) == {"rxe0": rxe0, "all": rxe0}
    assert "mounts" not in out.read_text()  # no /etc/nccl.conf on the node: nothing to mount
    written = out.stat().st_mtime_ns
    assert _cdi(sysfs, out, "--check").returncode == 0 and _cdi(sysfs, out).returncode == 0
    assert out.stat().st_mtime_ns == written  # unchanged: not written again
    # renumbered after a reboot: rxe0 now uverbs1, a second device took uverbs0
    (sysfs / "class" / "infiniband_verbs" / "uverbs0" / "ibdev").write_text("rxe1\n")
    _sysfs(sysfs, {"infiniband_verbs/uverbs1": "rxe0"})
    assert _cdi(sysfs, out, "--check").returncode == 1
    assert _cdi(sysfs, out).returncode == 0 and _devices(out)["rxe0"] == ["/dev/infiniband/uverbs1", rxe0[1]]
    # every device gone: no spec (a CDI spec lists at least one device)
    shutil.rmtree(sysfs / "class" / "infiniband_verbs")
    assert _cdi(sysfs, out).returncode == 0 and not out.exists()
    assert _cdi(sysfs, out, "--check").returncode == 0


def test_a_device_name_cdi_would_refuse_never_reaches_the_spec(tmp_path):
    """Outside the kernel's characters, not starting and ending with a letter or digit, or `all`:
    left out, the rest of the spec kept (one bad name would make a runtime refuse the whole file)."""
    refused = ["x: [y]", "-x", "x.", "_x", "all"]
    named = {f"infiniband_verbs/uverbs{i}": name for i, name in enumerate(["mlx5_0", "123", *refused])}
    sysfs = _sysfs(tmp_path / "sys", named)
    out = tmp_path / "rdmaprov-rdma.yaml"
    assert _cdi(sysfs, out).returncode == 0 and set(_devices(out)) == {"mlx5_0", "123", "all"}
    assert _cdi(sysfs, out, "--bogus").returncode == 64


def test_a_device_that_went_away_mid_read_leaves_the_others_listed(tmp_path):
    sysfs = _sysfs(tmp_path / "sys", {"infiniband_verbs/uverbs1": "mlx5_0"})
    (sysfs / "class" / "infiniband_verbs" / "uverbs0" / "ibdev").mkdir(parents=True)  # cat fails on it
    out = tmp_path / "rdmaprov-rdma.yaml"
    assert _cdi(sysfs, out).returncode == 0 and set(_devices(out)) == {"mlx5_0", "all"}


def test_runs_at_once_as_udev_starts_them_at_boot_leave_one_whole_spec(tmp_path):
    """Twelve HCAs (a DGX's eight and four more), two runs for each at once (uverbs and umad)
    with udev's bare environment: every run succeeds, one whole spec and no temp file are left,
    and it checks as current. (The script sets LC_ALL=C for one order in udev and in a login;
    this machine has no locale whose order differs from C's to show it.)"""
    hcas = {f"infiniband_verbs/uverbs{i}": f"mlx5_{i}" for i in range(12)}
    sysfs = _sysfs(tmp_path / "sys", hcas)
    out = tmp_path / "cdi" / "rdmaprov-rdma.yaml"
    runs = [subprocess.Popen(_cdi_command(sysfs, out), env={"PATH": os.environ["PATH"]}) for _ in range(24)]
    assert [run.wait(timeout=60) for run in runs] == [0] * 24
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    assert len(_devices(out)) == 13
    assert _cdi(sysfs, out, "--check").returncode == 0


def test_cdi_is_off_unless_asked_for_and_its_rule_runs_the_same_script(tmp_path):
    assert not node_config({}).containers.cdi and node_config({"containers": {"cdi": True}}).containers.cdi
    rules = CDI_UDEV_RULE.splitlines()[1:]
    assert rules == [
        f'SUBSYSTEM=="infiniband_verbs", RUN+="{CDI_SCRIPT}"',
        f'SUBSYSTEM=="infiniband_mad", RUN+="{CDI_SCRIPT}"',
        f'SUBSYSTEM=="misc", KERNEL=="rdma_cm", RUN+="{CDI_SCRIPT}"',
    ]
    assert cdi_script().startswith("#!/bin/sh\n")
    _, found = defaults_problems(tmp_path, "  containers: {cdi: yes please}\n")
    assert len(found) == 1 and "containers.cdi" in found[0], found


def test_the_rdma_netns_helper_is_installed_where_containers_run_in_exclusive_mode():
    podman = node_config({"containers": {"runtime": "podman"}}).containers
    assert rdma_netns_script(podman, "exclusive") == node_script("rdma_netns.sh")
    assert rdma_netns_script(podman, "shared") is None and rdma_netns_script(podman, None) is None
    assert rdma_netns_script(node_config({}).containers, "exclusive") is None


def _rdma_netns(*args: str) -> subprocess.CompletedProcess:
    """The helper as the node runs it, for what it refuses before touching anything."""
    script = resources.files("rdmaprov.deploys").joinpath("rdma_netns.sh")
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "args, words",
    [
        ((), "usage: rdmaprov-rdma-netns NETNS NETDEV [--address CIDR] [--rdma DEVICE] [--name NAME]"),
        (("job1",), "usage: "),
        (("job1", "mv0", "--address"), "usage: "),
        (("job1", "mv0", "--bogus", "x"), "usage: "),
        (("job;1", "mv0"), "job;1: use letters, digits, '_', '.' or '-' only"),
        (("job1", "mv0", "--rdma", "mlx5_0 x"), "mlx5_0 x: use letters, digits"),
        (("job1", "mv0", "--name", "$(reboot)"), "$(reboot): use letters, digits"),
    ],
)
def test_the_rdma_netns_helper_refuses_words_it_cannot_use_before_it_runs_anything(args, words):
    done = _rdma_netns(*args)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("rdmaprov-rdma-netns: ") and words in done.stderr, done.stderr


def test_enroot_containers_get_the_nodes_nccl_conf_read_only_and_start_without_one(tmp_path):
    assert not node_config({}).containers.enroot
    assert node_config({"containers": {"enroot": True}}).containers.enroot  # with any runtime, or none
    comment, line = ENROOT_FSTAB.splitlines()
    source, target, kind, options, _, passno = line.split()
    assert comment.startswith("# Managed by rdmaprov") and (source, target, kind) == (NCCL_CONF, NCCL_CONF, "none")
    # read-only, made in an image that has none, and no failure on a node that has none yet
    assert {"bind", "ro", "x-create=file", "nofail"} <= set(options.split(",")) and passno == "-1"
    _, found = defaults_problems(tmp_path, "  containers: {enroot: sure}\n")
    assert len(found) == 1 and "containers.enroot" in found[0], found
