"""A run split across processes gives the results one process gives, on real SSH hosts.

RDMAPROV_SHARDS=3 puts each of the farm's three hosts in a process of its own, so everything that
crosses hosts crosses processes: SSH trust (every node's keys on every node), a build compiled on
node1 and installed on node2 and node3 (placement, and the archive fetched to the control
machine before the others install it), a node that cannot be reached, drift. Each pair of runs
starts from the same state of the nodes; the JSON must be the same apart from its timings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.test_engine_ssh import BUILD, NCCL_DEFAULTS, _greet_tarball

pytestmark = pytest.mark.e2e

TAGS = ("--tags", "limits,nccl_env,ssh_trust,builds", "--skip-verify")
WRITTEN = (
    "/etc/nccl.conf /etc/profile.d/nccl.sh /etc/security/limits.d/90-rdmaprov-memlock.conf /etc/rdmaprov/applied.json "
    "/root/.ssh/authorized_keys /etc/ssh/ssh_known_hosts /etc/systemd/system.conf.d/90-rdmaprov-memlock.conf"
)


def _run(command: str, inventory: Path, shards: int, artifacts: Path) -> tuple[int, dict]:
    env = dict(os.environ, RDMAPROV_SHARDS=str(shards), RDMAPROV_ARTIFACTS=str(artifacts), COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "rdmaprov", command, str(inventory), *TAGS, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


def _timeless(doc: dict) -> dict:
    return {key: value for key, value in doc.items() if key not in ("duration_s", "started_at")}


def _forget_the_apply(farm, artifacts: Path) -> None:
    """Every node back to where it was before rdmaprov wrote anything (its SSH key pair stays,
    so both runs trust the same keys), and an empty artifact cache on the control machine."""
    for host in farm.hosts:
        done = farm.ssh(
            host,
            f"rm -rf {WRITTEN} /opt/greet /var/cache/rdmaprov && "
            "sed -i '/rdmaprov cluster/,/END rdmaprov/d' /etc/hosts",
        )
        assert done.returncode == 0, done.stderr
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir()


def _differences(one, other, path: str = "") -> list[str]:
    """Where two JSON values differ, as paths with both values."""
    if isinstance(one, dict) and isinstance(other, dict):
        keys = list(dict.fromkeys([*one, *other]))
        return [d for key in keys for d in _differences(one.get(key), other.get(key), f"{path}.{key}")]
    if isinstance(one, list) and isinstance(other, list) and len(one) == len(other):
        return [d for i, (a, b) in enumerate(zip(one, other, strict=True)) for d in _differences(a, b, f"{path}[{i}]")]
    return [] if one == other else [f"{path}: {one!r} != {other!r}"]


def _same(one: dict, sharded: dict) -> None:
    differences = _differences(_timeless(one), _timeless(sharded))
    assert not differences, "\n".join(differences[:20])


@pytest.fixture
def leave_no_build(ssh_farm, tmp_path):
    """The farm is shared: what this test built and installed goes again afterwards."""
    yield
    _forget_the_apply(ssh_farm, tmp_path / "artifacts")


def test_sharded_runs_give_the_results_of_one_process(ssh_farm, tmp_path, leave_no_build):
    inventory = ssh_farm.inventory(
        tmp_path / "farm.yaml",
        NCCL_DEFAULTS.format(debug="SHARDS")
        + BUILD.format(version="1.0", tarball=_greet_tarball(tmp_path, "1.0")).replace("defaults:\n", ""),
    )
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    for host in ssh_farm.hosts:  # each node has its key pair before both applies
        ssh_farm.ssh(host, "test -f /root/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519")

    applies = {}
    for shards in (1, 3):
        _forget_the_apply(ssh_farm, artifacts)
        applies[shards] = _run("apply", inventory, shards, artifacts)
    (code, one), (code_sharded, sharded) = applies[1], applies[3]
    assert code == code_sharded == 2, one
    _same(one, sharded)
    steps = {h["name"]: {op["name"]: op["status"] for op in h["ops"]} for h in sharded["hosts"]}
    assert steps["node1"]["builds | build greet built"] == "changed"  # the builder, in shard 1
    assert steps["node3"]["builds | build greet installed"] == "changed"  # its archive, in shard 3
    assert steps["node3"]["ssh_trust | SSH trust: authorized_keys"] == "changed"
    keys = {h.name: ssh_farm.ssh(h, "cat /root/.ssh/id_ed25519.pub").stdout.split()[1] for h in ssh_farm.hosts}
    authorized = ssh_farm.ssh(ssh_farm.hosts[2], "cat /root/.ssh/authorized_keys").stdout
    assert all(key in authorized for key in keys.values())  # node3 learnt the keys of the other shards' nodes
    assert ssh_farm.ssh(ssh_farm.hosts[2], "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.0"

    # drift on two nodes: a hand edit (corrective) and a removed profile
    ssh_farm.ssh(ssh_farm.hosts[1], "sed -i 's/NCCL_DEBUG=SHARDS/NCCL_DEBUG=TRACE/' /etc/nccl.conf")
    ssh_farm.ssh(ssh_farm.hosts[2], "rm /etc/profile.d/nccl.sh")
    (code, one), (code_sharded, sharded) = (_run("check", inventory, shards, artifacts) for shards in (1, 3))
    assert code == code_sharded == 2
    _same(one, sharded)
    assert [h["status"] for h in sharded["hosts"]] == ["unchanged", "changed", "changed"]

    # a node that does not answer: unreachable in both, and the others keep its trust entries
    down = ssh_farm.hosts[1]
    ssh_farm.stop_sshd(down)
    try:
        (code, one), (code_sharded, sharded) = (_run("check", inventory, shards, artifacts) for shards in (1, 3))
    finally:
        ssh_farm.start_sshd(down)
    assert code == code_sharded == 6
    _same(one, sharded)
    hosts = {h["name"]: h for h in sharded["hosts"]}
    assert hosts["node2"]["status"] == "unreachable"
    assert "SSH trust: node2 was not reached this run; kept its current entries" in hosts["node1"]["warnings"]


def test_serial_batches_are_each_split_and_max_fail_stops_the_next(ssh_farm, tmp_path, monkeypatch):
    """--serial 2 over three hosts with two processes: the first batch runs in two shards, the
    second in one; with node1 unreachable the first batch is over --max-fail 0% and node3 is never
    touched, exactly as in one process."""
    monkeypatch.setenv("RDMAPROV_SHARDS", "2")
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    # NCCL_DEBUG values of this test's own: the other tests on these hosts expect to change theirs
    inventory = ssh_farm.inventory(tmp_path / "farm.yaml", NCCL_DEFAULTS.format(debug="SERIAL-A"))
    env = dict(os.environ, RDMAPROV_ARTIFACTS=str(artifacts))
    tags = ("--tags", "limits,nccl_env", "--skip-verify")

    def apply(*args: str) -> tuple[int, dict, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "rdmaprov", "apply", str(inventory), *tags, "--json", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=REPO,
        )
        return proc.returncode, json.loads(proc.stdout), proc.stderr

    code, result, err = apply("--serial", "2")
    assert code in (0, 2), err
    assert [(h["name"], h["batch"]) for h in result["hosts"]] == [("node1", 1), ("node2", 1), ("node3", 2)]
    assert [line for line in err.splitlines() if line.startswith("batch ")] == [
        "batch 1/2: node1, node2",
        "batch 2/2: node3",
    ]

    inventory = ssh_farm.inventory(tmp_path / "farm.yaml", NCCL_DEFAULTS.format(debug="SERIAL-B"))
    ssh_farm.stop_sshd(ssh_farm.hosts[0])
    try:
        code, result, err = apply("--serial", "2", "--max-fail", "0%")
    finally:
        ssh_farm.start_sshd(ssh_farm.hosts[0])
    assert code == 6, err
    assert [h["status"] for h in result["hosts"]] == ["unreachable", "changed", "skipped"]
    assert "NCCL_DEBUG=SERIAL-B" in ssh_farm.ssh(ssh_farm.hosts[1], "cat /etc/nccl.conf").stdout
    assert "NCCL_DEBUG=SERIAL-B" not in ssh_farm.ssh(ssh_farm.hosts[2], "cat /etc/nccl.conf").stdout


GPU_NODES = """  gpu: {count: 1, cuda_version: "12.2", driver_version: "535.104.05"}
  nccl:
    version: 2.18.3-1
"""
ALL_REDUCE_PERF = "/opt/nccl-tests/current/bin/all_reduce_perf"


def test_verify_and_facts_read_across_processes_say_what_one_process_says(ssh_farm, tmp_path):
    """Verify without gates and `facts` keep no connection after reading: with many hosts they
    read in one process per core. These hosts have no RDMA device or GPU, so verify fails its
    checks: the same findings, the same way, with a host down. They are declared GPU nodes with
    nccl-tests, and node1 and node3 hold an all_reduce_perf (a real program, linked without
    NCCL): the report read this way must include its linkage, as the one read for the gates does."""
    inventory = ssh_farm.inventory(
        tmp_path / "farm.yaml", NCCL_DEFAULTS.format(debug="WARN").replace("  nccl:\n", GPU_NODES, 1)
    )
    for host in (ssh_farm.hosts[0], ssh_farm.hosts[2]):
        done = ssh_farm.ssh(host, f"mkdir -p {ALL_REDUCE_PERF.rsplit('/', 1)[0]} && cp /bin/true {ALL_REDUCE_PERF}")
        assert done.returncode == 0, done.stderr

    def both(command: str) -> tuple[dict, dict]:
        out = []
        for shards in ("1", "3"):
            proc = subprocess.run(
                [sys.executable, "-m", "rdmaprov", command, str(inventory), "--json"],
                capture_output=True,
                text=True,
                timeout=300,
                env=dict(os.environ, RDMAPROV_SHARDS=shards),
                cwd=REPO,
            )
            assert proc.returncode == 4, proc.stderr  # unreachable host, failed checks
            out.append(json.loads(proc.stdout))
        return out[0], out[1]

    ssh_farm.stop_sshd(ssh_farm.hosts[1])
    try:
        one, sharded = both("verify")
        facts_one, facts_sharded = both("facts")
    finally:
        ssh_farm.start_sshd(ssh_farm.hosts[1])
        for host in (ssh_farm.hosts[0], ssh_farm.hosts[2]):
            ssh_farm.ssh(host, "rm -rf /opt/nccl-tests")
    _same(one, sharded)
    assert [v["status"] for v in sharded["verify"]] == ["failed", "unreachable", "failed"]
    assert facts_sharded == facts_one and "unreachable" in facts_sharded["node2"]
    for doc in (one, sharded):
        found = {v["name"]: f["found"] for v in doc["verify"] for f in v["findings"] if f["id"] == "nccl.tests_library"}
        assert found == {name: f"{ALL_REDUCE_PERF}: libnccl.so.2 not found" for name in ("node1", "node3")}
    for facts in (facts_one, facts_sharded):
        assert facts["node1"]["linkage"][ALL_REDUCE_PERF]["exists"] is True
