"""Builds shipped node to node over the cluster's SSH trust, on six real SSH hosts.

node1 builds; the others receive the archive in a binomial tree (builds/fanout.py): node2,
node3 and node5 from node1, node4 and node6 from node2. Each copy is checked against the
archive's sha256 by the node that receives it. node2 is then made to serve damaged copies, or
to refuse the other nodes' connections: node4 and node6 must refuse or route around it and get
the archive from node1, and the control machine sends nothing.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import rdmaprov_json
from tests.e2e.test_engine_ssh import BUILD, _greet_tarball

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    """Six sshd hosts of this module's own (the shared farm has three: too few for a tree)."""
    from tests.conftest import _need_root
    from tests.support.sshhosts import SSHHostFarm

    _need_root()
    farm = SSHHostFarm(6).start()
    try:
        yield farm
    finally:
        farm.stop()


@pytest.fixture(autouse=True)
def own_artifact_cache(tmp_path_factory, monkeypatch) -> None:
    """This module's archives stay out of the session's control-machine cache (other tests count
    what is in it)."""
    monkeypatch.setenv("RDMAPROV_ARTIFACTS", str(tmp_path_factory.getbasetemp() / "fanout-artifacts"))


def _apply(farm, tmp_path, version: str) -> tuple[int, dict]:
    """ssh_trust (so the nodes trust each other's keys and know their host keys) and the build."""
    tarball = tmp_path / f"greet-{version}.tar.gz"
    inventory = farm.inventory(
        tmp_path / "six.yaml",
        BUILD.format(version=version, tarball=tarball if tarball.exists() else _greet_tarball(tmp_path, version)),
    )
    return rdmaprov_json("apply", str(inventory), "--tags", "ssh_trust,builds", "--skip-verify")


def _sha_installed(farm, host) -> str:
    return farm.ssh(host, "cat /opt/greet/current/.rdmaprov-build").stdout.split()[1]


def _control_bytes(farm) -> int:
    """Bytes the control machine has sent onto the farm's bridge (node-to-node traffic is
    switched between the nodes' links and never counted here)."""
    return int(Path(f"/sys/class/net/{farm.bridge}/statistics/tx_bytes").read_text())


@contextmanager
def cat_replaced(farm, host, wrapper: str) -> Iterator[None]:
    """`cat` on `host` is the script `wrapper` (the real one at /run/cat.real) until the block
    ends: how a node sends its archive to the others (`ssh … cat ARCHIVE`)."""
    done = farm.ssh(
        host,
        f"cp /usr/bin/cat /run/cat.real && printf %s {shlex.quote(wrapper)} > /run/rdmaprov-test-cat && "
        "chmod +x /run/rdmaprov-test-cat && mount --bind /run/rdmaprov-test-cat /usr/bin/cat",
    )
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        farm.ssh(host, "umount -l /usr/bin/cat")


def serving_damaged_copies(farm, host):
    """`cat` of a build archive on `host` gives it with its last bytes changed: what a node with a
    failing disk or memory would send."""
    return cat_replaced(
        farm,
        host,
        '#!/bin/sh\ncase "$1" in *.tar.gz) /run/cat.real "$@" | head -c -8; printf 01234567;; '
        '*) exec /run/cat.real "$@";; esac\n',
    )


@contextmanager
def refusing_the_other_nodes(farm, host) -> Iterator[None]:
    """`host` answers the control machine but drops the other nodes' SSH connections: a peer that
    is dead to them."""
    control = str(farm.network.network_address + 1)
    rule = f"INPUT -p tcp --dport 22 ! -s {control} -j DROP"
    subprocess.run(["ip", "netns", "exec", host.netns, "iptables", "-I", *rule.split()], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "netns", "exec", host.netns, "iptables", "-D", *rule.split()], check=True)


def _receive_op(result: dict, host: str) -> dict:
    return next(
        op
        for h in result["hosts"]
        if h["name"] == host
        for op in h["ops"]
        if op["name"] == "builds | build greet installed"
    )


def _forget(farm, hosts) -> None:
    """These nodes lose the installed build and their copy of the archive."""
    for host in hosts:
        farm.ssh(host, "rm -rf /opt/greet /var/cache/rdmaprov/artifacts/greet-*")


def test_nodes_pass_the_archive_on_in_a_tree_and_the_control_machine_sends_none(six, tmp_path):
    before = _control_bytes(six)
    code, result = _apply(six, tmp_path, "1.0")
    assert code == 2, [(h["name"], h["status"], h["error"], h["warnings"]) for h in result["hosts"]]
    sent = _control_bytes(six) - before
    sources = {h.name: _receive_op(result, h.name)["commands"][0] for h in six.hosts[1:]}
    assert (
        sources["node2"].startswith("receive greet-1.0-")
        and " from node1, else the control machine" in sources["node2"]
    )
    assert " from node2, else node1, else the control machine (sha256 checked)" in sources["node4"]
    assert " from node2, else node1," in sources["node6"] and " from node1, else " in sources["node5"]
    archive = sources["node2"].split()[1]
    tarball_bytes = (tmp_path / "greet-1.0.tar.gz").stat().st_size
    shas = {_sha_installed(six, host) for host in six.hosts}
    assert len(shas) == 1  # every node unpacked the one archive node1 built
    for host in six.hosts:
        assert six.ssh(host, "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.0"
        assert six.ssh(host, f"cut -d' ' -f1 /var/cache/rdmaprov/artifacts/{archive}.sha256").stdout.strip() in shas
    # the source tarball went to the builder once; the archive went to no node from here
    assert sent < 400_000 + tarball_bytes, sent


@pytest.mark.parametrize("shards", ["1", "3"], ids=["one-process", "three-processes"])
def test_a_copy_damaged_at_one_hop_is_refused_there_and_received_from_another_holder(
    six, tmp_path, shards, monkeypatch
):
    monkeypatch.setenv("RDMAPROV_SHARDS", shards)  # three: who holds what crosses processes too
    assert _apply(six, tmp_path, "1.0")[0] in (0, 2)
    node2, node4, node6 = six.hosts[1], six.hosts[3], six.hosts[5]
    _forget(six, six.hosts[1:])  # only node1 holds it: the tree is the first test's
    with serving_damaged_copies(six, node2):
        code, result = _apply(six, tmp_path, "1.0")
    assert code == 2, result
    hosts = {h["name"]: h for h in result["hosts"]}
    for name in ("node4", "node6"):
        assert hosts[name]["status"] == "changed", hosts[name]
        warning = " ".join(hosts[name]["warnings"])
        assert "from node2 is damaged (sha256 " in warning and "received it from node1" in warning, warning
    expected = _sha_installed(six, six.hosts[0])
    for host in (node4, node6):
        assert _sha_installed(six, host) == expected
        assert six.ssh(host, "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.0"
        assert six.ssh(host, "ls /var/cache/rdmaprov/artifacts | grep -c part || true").stdout.strip() == "0"


def test_a_peer_the_others_cannot_reach_is_routed_around(six, tmp_path):
    assert _apply(six, tmp_path, "1.0")[0] in (0, 2)
    node2 = six.hosts[1]
    _forget(six, six.hosts[1:])  # node2 receives it from node1, then node4 and node6 ask it
    before = _control_bytes(six)
    with refusing_the_other_nodes(six, node2):
        code, result = _apply(six, tmp_path, "1.0")
    assert code == 2, result
    hosts = {h["name"]: h for h in result["hosts"]}
    assert hosts["node2"]["status"] == "changed" and hosts["node2"]["warnings"] == []  # it received from node1
    for name in ("node4", "node6"):
        warning = " ".join(hosts[name]["warnings"])
        assert "cannot copy greet-1.0-" in warning and "from node2" in warning and "received it from node1" in warning
        assert _sha_installed(six, six.hosts[int(name[-1]) - 1]) == _sha_installed(six, six.hosts[0])
    assert _control_bytes(six) - before < 400_000  # still not one copy from the control machine


def test_an_archive_only_the_control_machine_holds_goes_to_two_fresh_nodes_and_on_from_them(six, tmp_path):
    # built in an earlier run, kept in the control machine's cache; no node holds it, and no node
    # has rdmaprov's archive folder yet (a fresh cluster): two nodes receive it from here
    assert _apply(six, tmp_path, "1.0")[0] in (0, 2)
    for host in six.hosts:
        six.ssh(host, "rm -rf /opt/greet /var/cache/rdmaprov")
    before = _control_bytes(six)
    code, result = _apply(six, tmp_path, "1.0")
    assert code == 2, [(h["name"], h["status"], h["error"]) for h in result["hosts"]]
    sources = {h.name: _receive_op(result, h.name)["commands"][0] for h in six.hosts}
    from_here = [
        name for name, shown in sources.items() if shown.endswith(" from the control machine (sha256 checked)")
    ]
    assert len(from_here) == 2, sources
    archive_bytes = six.ssh(six.hosts[0], f"stat -c %s /var/cache/rdmaprov/artifacts/{sources['node1'].split()[1]}")
    sent = _control_bytes(six) - before
    assert sent < 2 * int(archive_bytes.stdout) + 400_000, sent  # two copies, the others node to node
    for host in six.hosts:
        assert six.ssh(host, "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.0"


# node2's slow send. The farm's hosts share this machine's processes (no PID namespace of their
# own), so `ps` on node2 lists every process here: a plain `sleep 60` also matched other tests'
# commands (the lab's `ssh … pgrep -f '^sleep 60$'`), which sent Ctrl-C before this run had even
# connected, and `pkill -f 'sleep 60'` could end processes that were not this test's.
SLOW_SEND = "sleep 60.25"
SLOW_SEND_ONLY = shlex.quote(f"^{SLOW_SEND.replace('.', '[.]')}$")


@pytest.mark.parametrize("shards", ["1", "3"], ids=["one-process", "three-processes"])
def test_ctrl_c_while_nodes_wait_for_or_pull_a_copy_reports_them_interrupted(six, tmp_path, shards, monkeypatch):
    """node2 sends its copy slowly (its cat sleeps first); node4 and node6 pull from it. Ctrl-C
    twice stops them now, as it stops any running command: they are reported interrupted. In
    three processes the second Ctrl-C also reaches a shard that finished and waits for the others."""
    monkeypatch.setenv("RDMAPROV_SHARDS", shards)
    import json
    import signal
    import sys
    import time

    from tests.conftest import REPO

    assert _apply(six, tmp_path, "1.0")[0] in (0, 2)
    node2 = six.hosts[1]
    _forget(six, six.hosts[1:])
    slow = f'#!/bin/sh\ncase "$1" in *.tar.gz) {SLOW_SEND};; esac\nexec /run/cat.real "$@"\n'
    with cat_replaced(six, node2, slow):
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rdmaprov", "apply", str(tmp_path / "six.yaml"), "--tags", "builds"]
                + ["--skip-verify", "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            deadline, pulling = time.monotonic() + 120, False
            while time.monotonic() < deadline and not pulling:
                pulling = six.ssh(node2, f"pgrep -f {SLOW_SEND_ONLY}").returncode == 0  # node4, node6 pull
                time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            six.ssh(node2, f"pkill -f {SLOW_SEND_ONLY} || true")
    # interrupted before any node pulled, the run proves nothing of a pull: say so, not a status
    assert pulling, f"no node pulled from node2 within 120 s; the run said: {err[-2000:]}"
    assert out, err
    doc = json.loads(out)
    assert proc.returncode == 130 and doc["interrupted"] is True, err
    hosts = {h["name"]: h for h in doc["hosts"]}
    for name in ("node4", "node6"):
        assert hosts[name]["status"] == "interrupted", hosts[name]
    assert hosts["node2"]["status"] == "changed" and "Traceback" not in err, err
