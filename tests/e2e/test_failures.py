"""Failures that explain themselves, on real sshd hosts: a host cut off mid-apply, a command past
its deadline, Ctrl-C mid-apply. The apply is slowed for real: on each host `mv` (which installs
every file rdmaprov writes) is replaced by a wrapper that marks that it started and sleeps."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import jsonschema
import pytest

from rdmaprov.schemas import load_schema
from tests.conftest import REPO, rdmaprov_json

pytestmark = pytest.mark.e2e

TAGS = ("--tags", "limits,nccl_env", "--skip-verify")
STARTED = "/run/rdmaprov-slow-mv-started"
WRITTEN = "/etc/security/limits.d/90-rdmaprov-memlock.conf /etc/nccl.conf"


@pytest.fixture(params=["1", "3"], ids=["one-process", "process-per-host"])
def shards(request, monkeypatch) -> str:
    """Each failure as one process meets it, and split across processes (engine/shards.py), where
    the host it hits is in a process of its own."""
    monkeypatch.setenv("RDMAPROV_SHARDS", request.param)
    return request.param


def _inventory(farm, tmp_path, extra_ssh: str = "") -> str:
    path = farm.inventory(tmp_path / "farm.yaml", "defaults:\n  fabric: roce\n  rdma: {devices: [mlx5_0]}\n")
    if extra_ssh:
        path.write_text(path.read_text().replace("    connect_timeout: 5\n", f"    connect_timeout: 5\n{extra_ssh}"))
    return str(path)


@contextmanager
def slow_mv(farm, seconds: int) -> Iterator[None]:
    """Every host's first `mv` sleeps `seconds` first; the files rdmaprov writes are removed, so an apply
    must write both (limits first, then nccl_env). Afterwards the wrappers still sleeping (a
    command past its deadline goes on on the node) are ended by their PIDs."""
    wrapper = (
        f'#!/bin/sh\n[ -e {STARTED} ] && exec /run/mv.real "$@"\necho $$ >> /run/slow-mv.pids\n'
        f"touch {STARTED}\nsleep {seconds} &\n"
        'echo $! >> /run/slow-mv.pids\nwait $!\nexec /run/mv.real "$@"\n'
    )
    for host in farm.hosts:
        done = farm.ssh(
            host,
            f"rm -f {WRITTEN} {STARTED} /run/slow-mv.pids && cp /usr/bin/mv /run/mv.real && "
            f"printf %s {shlex.quote(wrapper)} > /run/slow-mv && chmod +x /run/slow-mv && "
            "mount --bind /run/slow-mv /usr/bin/mv",
        )
        assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        for host in farm.hosts:
            farm.ssh(
                host,
                f"[ -e /run/slow-mv.pids ] && kill $(cat /run/slow-mv.pids) 2>/dev/null; umount -l /usr/bin/mv; "
                f"rm -f {STARTED} /run/slow-mv.pids",
            )


def _start_apply(inv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rdmaprov", "apply", inv, *TAGS, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _wait_started(farm, host, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if farm.ssh(host, f"test -e {STARTED}").returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the apply never reached its file writes on {host.name}")


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {proc.returncode}):\n{out}\n{err}") from None
    jsonschema.validate(doc, load_schema("result"))
    return proc.returncode, doc, err


def _hosts(doc: dict) -> dict[str, dict]:
    return {h["name"]: h for h in doc["hosts"]}


def test_a_host_cut_off_mid_apply_is_lost_alone_and_the_next_apply_converges_it(ssh_farm, tmp_path, shards):
    inv = _inventory(ssh_farm, tmp_path)
    cut = ssh_farm.hosts[1]
    veth = f"{ssh_farm.prefix}v2"  # the host side of node2's link
    with slow_mv(ssh_farm, 8):
        proc = _start_apply(inv)
        try:
            _wait_started(ssh_farm, cut)
            subprocess.run(["ip", "link", "set", veth, "down"], check=True)
            cut_at = time.monotonic()
            code, doc, err = _finish(proc, timeout=180)
            took = time.monotonic() - cut_at
        finally:
            subprocess.run(["ip", "link", "set", veth, "up"], check=True)
            if proc.poll() is None:
                proc.kill()
    hosts = _hosts(doc)
    assert code == 6, (doc, err)
    assert (hosts["node1"]["status"], hosts["node2"]["status"], hosts["node3"]["status"]) == (
        "changed",
        "unreachable",
        "changed",
    ), doc
    assert "connection lost" in hosts["node2"]["error"] and "has not answered since" in hosts["node2"]["error"]
    # lost within the connect timeout (5 s) plus a keepalive, beside the others' 8 s write; 5 s to see it
    # stay away
    assert took < 45, (took, doc["duration_s"], hosts["node2"]["error"])

    for _ in range(30):  # the link is back: wait until node2 answers again
        if ssh_farm.ssh(cut, "true").returncode == 0:
            break
        time.sleep(1)
    code, again = rdmaprov_json("apply", inv, *TAGS)
    assert code == 2, again
    assert {h["name"]: h["status"] for h in again["hosts"]} == {
        "node1": "unchanged",
        "node2": "changed",
        "node3": "unchanged",
    }


def test_a_command_past_its_deadline_is_stopped_and_named(ssh_farm, tmp_path, shards):
    inv = _inventory(ssh_farm, tmp_path, extra_ssh="    command_timeout: 10\n")
    with slow_mv(ssh_farm, 60):
        started = time.monotonic()
        code, doc = rdmaprov_json("apply", inv, *TAGS, timeout=120)
        took = time.monotonic() - started
    assert code in (4, 6), doc
    for host in doc["hosts"]:
        assert host["status"] == "failed"
        assert "timed out after 10 s (ssh.command_timeout)" in host["error"], host
    assert took < 50, took


def test_ctrl_c_mid_apply_stops_new_work_and_reports_where_each_host_stood(ssh_farm, tmp_path, shards):
    inv = _inventory(ssh_farm, tmp_path)
    with slow_mv(ssh_farm, 6):
        proc = _start_apply(inv)
        try:
            _wait_started(ssh_farm, ssh_farm.hosts[0])
            proc.send_signal(signal.SIGINT)
            asked = time.monotonic()
            code, doc, err = _finish(proc, timeout=90)
            took = time.monotonic() - asked
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 130 and doc["interrupted"] is True and doc["exit_code"] == 130, (doc, err)
    assert "Traceback" not in err and "interrupted: no new operations start" in err, err
    assert took < 20, took  # the running 6 s write finishes; nothing after it starts
    for host in doc["hosts"]:
        # the write that was running finished; what came after it never started
        assert host["status"] == "interrupted", host
        assert host["error"].startswith("interrupted before "), host
        assert "verify" not in doc or doc.get("verify") is None
    code, again = rdmaprov_json("apply", inv, *TAGS)
    assert code == 2 and all(h["status"] == "changed" for h in again["hosts"]), again


def test_a_command_past_its_gate_deadline_is_stopped_and_says_so(ssh_farm, tmp_path):
    from rdmaprov.engine.session import Session
    from rdmaprov.inventory import load_inventory

    inventory = load_inventory(_inventory(ssh_farm, tmp_path))
    host = ssh_farm.hosts[0].name
    with Session(inventory, [host]) as session:
        started = time.monotonic()
        stuck = session.run(host, "echo started; sleep 60", 3)
        elapsed = time.monotonic() - started
        failed = session.run(host, "echo no >&2; exit 3", 3)
        left = session.run(host, "pgrep -f '^sleep 60$' || true").stdout.strip()
    assert stuck.timed_out and not stuck.ok and elapsed < 15, (stuck, elapsed)
    assert stuck.stdout == "started" and stuck.stderr.endswith("rdmaprov: stopped at its deadline of 3 s")
    assert not failed.ok and not failed.timed_out and failed.stderr == "no"
    assert left == ""  # stopped on the node, not only given up on
