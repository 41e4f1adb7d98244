"""The lab end to end: VMs reach PORT_ACTIVE through rdmaprov's own deploys and move RDMA traffic;
16 containers answer SSH; `lab down` leaves nothing behind; bad input gets clear errors."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from rdmaprov.health.baselines import baseline_file
from rdmaprov.paths import PROBE_BINARY
from rdmaprov.schemas import load_schema
from tests.conftest import REPO, rdmaprov, rdmaprov_json
from tests.support.browser import CHROMIUM, MISSING, chromium, console
from tests.support.capture import roce_classes
from tests.support.container_image import IMAGE, image_script
from tests.support.pages import Page
from tests.support.promtool import promtool_check
from tests.support.slurm_fleet import SINFO, sinfo_states

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.fixture(autouse=True)
def _lab_vms_answering(request):
    """Each lab test starts on VMs that answer: one whose emulated NIC hung in an earlier test is
    booted again (TestLab.restart_hung says why), instead of failing every test after it."""
    if "vm_lab" in request.fixturenames:
        request.getfixturevalue("vm_lab").restart_hung()


@pytest.mark.saves_pair
def test_vm_lab_node_stack_converges_verifies_and_passes_gates(vm_lab):
    assert "lab up: 3 vm nodes (Debian 12 ×2, Debian 13 ×1)" in vm_lab.up_output
    code, first = rdmaprov_json("apply", vm_lab.inventory, timeout=1500)
    problems = [f for v in first.get("verify", []) for f in v["findings"] if not f["ok"]] + [
        g for g in first.get("gates", []) if not g["passed"]
    ]
    assert code == 2, (problems, [(h["name"], h["error"]) for h in first["hosts"]])
    assert all(h["status"] == "changed" for h in first["hosts"])
    # apply ended with verify and both gates, run for real over rxe and MPI
    assert [v["status"] for v in first["verify"]] == ["ok", "ok"], first["verify"]
    gates = {g["gate"]: g for g in first["gates"]}
    # judged by what the lab is: a healthy lab ends PASS, never WARN (issue 37)
    assert {g["status"] for g in first["gates"] if g["gate"] != "node"} == {"pass"}, first["gates"]
    assert "gates_not_run" not in first
    assert gates["ib_write_bw"]["passed"] and gates["ib_write_bw"]["measured"] > 0, gates
    assert gates["all_reduce"]["passed"] and gates["all_reduce"]["details"]["kind"] == "cpu-probe", gates
    assert gates["all_reduce"]["details"]["rows"][-1]["size"] == 4 << 20
    # the node gate judged each node alone: lab VMs have no GPU, so each is skipped, not failed
    node_gates = [g for g in first["gates"] if g["gate"] == "node"]
    assert [(g["subject"], g["status"], g["passed"]) for g in node_gates] == [
        ("node1", "skipped", True),
        ("node2", "skipped", True),
    ]
    assert node_gates[0]["reason"].startswith("skipped (no GPU")

    for node in ("node1", "node2"):
        # `lab ssh` as a user runs it (vm_lab.ssh runs its ssh command line without it)
        devinfo = rdmaprov("lab", "--dir", str(vm_lab.dir), "ssh", node, "--", "ibv_devinfo -d rxe0").stdout
        assert "PORT_ACTIVE" in devinfo and "link_layer:\t\tEthernet" in devinfo
        # packages came from the lab mirror only: every other source was set aside
        sources = vm_lab.ssh(node, "cat /etc/apt/sources.list.d/*.list; ls /etc/apt").stdout
        assert re.search(
            r"deb \[signed-by=/etc/apt/keyrings/rdmaprov-mirror.asc\] http://10\.78\.\d+\.1:8079/debian bookworm main",
            sources,
        )
        assert "sources.list.rdmaprov-disabled" in sources
        assert vm_lab.ssh(node, "systemctl is-enabled rdmaprov-rxe-links.service").stdout.strip() == "enabled"
        assert vm_lab.ssh(node, "rdma system show").stdout.split()[:2] == ["netns", "exclusive"]
        conf = vm_lab.ssh(node, "cat /etc/nccl.conf").stdout
        assert {"NCCL_IB_HCA=rxe", "NCCL_IB_GID_INDEX=1", "NCCL_SOCKET_IFNAME=eth0", "NCCL_DEBUG=WARN"} <= set(
            conf.splitlines()
        )

    # the gate's probe was compiled on node1 only; node2 received it from node1 over the cluster's SSH
    # trust (not from the control machine) and checked it against its sha256
    ops = {h["name"]: {op["name"]: op for op in h["ops"] if op["deploy"] == "gate_tools"} for h in first["hosts"]}
    assert ops["node1"]["gate_tools | allreduce probe built"]["status"] == "changed"
    assert ops["node2"]["gate_tools | allreduce probe built"]["status"] == "unchanged"
    shipped = ops["node2"]["gate_tools | allreduce probe installed"]
    assert shipped["status"] == "changed", shipped
    assert shipped["commands"][0].startswith("receive allreduce-probe-1-"), shipped["commands"]
    assert " from node1, else the control machine (sha256 checked)" in shipped["commands"][0]
    assert vm_lab.ssh("node2", "test -e /var/cache/rdmaprov/build || echo never-built").stdout.strip() == "never-built"
    sums = {
        node: vm_lab.ssh(node, "cat /opt/rdmaprov/probe/current/.rdmaprov-build").stdout.split()[1]
        for node in ("node1", "node2")
    }
    assert (
        sums["node1"]
        == sums["node2"]
        == vm_lab.ssh("node1", "cat /var/cache/rdmaprov/artifacts/allreduce-probe-1-*.sha256").stdout.split()[0]
    )

    # passwordless, pinned SSH between the nodes: mpirun across both VMs with no prompt
    mpirun = vm_lab.ssh(
        "node1",
        "mpirun --allow-run-as-root -np 2 -H node1,node2 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "
        "eth0 --mca oob_tcp_if_include eth0 hostname < /dev/null",
        timeout=300,
    )
    assert mpirun.returncode == 0, mpirun.stderr
    assert sorted(mpirun.stdout.split()) == ["node1", "node2"]

    # every VM made its own host keys at its first boot (the image holds none; the Vagrant box is
    # made from it): no two of the lab's pinned keys are the same
    known = yaml.safe_load(open(vm_lab.inventory))["cluster"]["ssh"]["known_hosts"]
    pinned = [line.split()[2] for line in open(known).read().splitlines() if line.strip()]
    assert len(pinned) >= 6 and len(set(pinned)) == len(pinned), pinned
    # a second apply changing nothing: the Open MPI test's last apply, on all three VMs (and the
    # Slurm test's repair, which changes only the link it repairs)


def _gates_only(
    vm_lab,
    tmp_path,
    name: str,
    devices: list[str],
    gates: dict,
    connect_timeout: int | None = None,
    base: str | None = None,
) -> str:
    """The lab cluster's inventory (or `base`) with other rdma.devices and these gate settings
    (others off), and with `connect_timeout`, another silence after which a node counts as lost."""
    data = yaml.safe_load(open(base or vm_lab.inventory))
    data["defaults"]["rdma"]["devices"] = devices
    if connect_timeout is not None:
        data["cluster"]["ssh"]["connect_timeout"] = connect_timeout
    settings = {gate: {"enabled": False} for gate in ("node", "ib_write_bw", "rail", "latency", "all_reduce")}
    for gate, values in gates.items():
        settings[gate] = {**data["cluster"]["gates"].get(gate, {}), **values}
    data["cluster"]["gates"] = settings
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _second_rail(vm_lab, node: str, index: int) -> str:
    """A second rail on a lab VM: a macvlan on eth0 in a subnet of its own, with rxe1 on it."""
    third = vm_lab.subnet.split(".")[2]
    address = f"10.201.{third}.{11 + index}"
    script = (
        "ip link del mv0 2>/dev/null; ip link add mv0 link eth0 type macvlan mode bridge && "
        f"ip addr add {address}/24 dev mv0 && ip link set mv0 up && rdma link add rxe1 type rxe netdev mv0"
    )
    done = vm_lab.ssh(node, script)
    assert done.returncode == 0, done.stderr
    return address


def _by_subject(result: dict, gate: str) -> dict[str, dict]:
    return {g["subject"]: g for g in result["gates"] if g["gate"] == gate}


def _gates_until(
    vm_lab, inventory: str, settled, start_over=lambda: None, tries: int = 3, *args: str, verb=("verify", "--gates")
) -> tuple[int, dict]:
    """verify --gates (or `verb`) until `settled(result)`, at most `tries` runs. Two rails share
    each lab VM's one emulated CPU, and now and then one of them completes nothing in its window
    under CI's load (seen: rxe1 0 Gb/s while rxe0 passed, once in three runs), and QEMU's NIC now
    and then stalls a VM mid-transfer (docs/lab.md): a step that needs a healthy lane runs again,
    as many as three times, instead of failing on the emulation. A VM that stopped answering
    meanwhile is booted again before the next try; start_over then puts back what the test set
    up on it by hand."""
    for attempt in range(tries):
        if attempt:
            vm_lab.restart_hung()
        start_over()
        code, result = rdmaprov_json(*verb, inventory, *args, timeout=1200 if verb[0] == "apply" else 900)
        if settled(result):
            break
    return code, result


def _stalled_lanes_rerun(vm_lab, inventory: str, gates: list[dict]) -> dict[tuple[str, str], dict]:
    """Gates by (gate, subject), the perftest lanes that failed measured again (_gates_until says
    why a lab lane can stall): a test asserting what else fails is not decided by the emulation."""
    found = {(g["gate"], g["subject"]): g for g in gates}
    stalled = {key for key, g in found.items() if not g["passed"] and key[0] in ("ib_write_bw", "rail", "latency")}
    if stalled:
        # the stalled pairs' nodes alone: a ring of two gives those pairs again
        hosts = sorted({h.split(":")[0] for _, subject in stalled for h in subject.split(" -> ")})

        def measured(result: dict) -> list[dict]:
            return [g for g in result["gates"] if (g["gate"], g["subject"]) in stalled]

        def settled(result: dict) -> bool:
            return len(measured(result)) == len(stalled) and all(g["passed"] for g in measured(result))

        _, again = _gates_until(vm_lab, inventory, settled, lambda: None, 3, "--limit", ",".join(hosts))
        assert len(measured(again)) == len(stalled), (stalled, again["gates"])
        found.update({(g["gate"], g["subject"]): g for g in measured(again)})
    return found


def test_rail_and_latency_gates_judge_each_rxe_rail_and_each_rail_against_its_own_past(vm_lab, tmp_path, monkeypatch):
    """Two rails per VM (rxe0 on eth0, rxe1 on a macvlan), both tested at once: a verdict per HCA
    for bandwidth and for p99 latency. Then rxe1's traffic into node1 is policed: first to well
    under its own past but above the floor (a warning: below its baseline), then under the floor
    (that HCA fails, the other passes). Policing drops at ingress instead of queueing: an rxe
    packet still queued in an egress qdisc when its QP is destroyed crashed a lab VM's 6.1 kernel
    (seen with tbf while trying this)."""
    state = tmp_path / "state"
    monkeypatch.setenv("RDMAPROV_STATE", str(state))  # this test's own baselines

    def rails_up() -> None:  # made once, and again on a VM booted again by _gates_until
        for i, node in enumerate(("node1", "node2")):
            if vm_lab.ssh(node, "ip -o link show mv0").returncode != 0:
                _second_rail(vm_lab, node, i)

    rails_up()
    # Two rails share each VM's one emulated CPU: with 1 MiB messages for 10 s (perftest measures
    # the middle 6 s) both get a fair share; 3 s windows of 64 KiB ones sometimes saw no completion
    gates = {
        "rail": {"enabled": True, "size": 1048576, "duration_s": 10, "min_gbps": 0.002},
        "latency": {"enabled": True},
        "baseline": {"runs": 1},
    }
    inventory = _gates_only(vm_lab, tmp_path, "rails.yaml", ["rxe0", "rxe1"], gates)
    rails = ["node1:rxe0 -> node2:rxe0", "node1:rxe1 -> node2:rxe1"]
    police = "tc qdisc replace dev mv0 ingress && tc filter replace dev mv0 parent ffff: matchall action police "
    try:

        def both_passed(result: dict) -> bool:
            return all(g["passed"] for g in result["gates"] if g["gate"] in ("rail", "latency"))

        def from_no_baselines() -> None:  # so that each rail's first figure is its baseline
            rails_up()
            shutil.rmtree(state, ignore_errors=True)

        _, first = _gates_until(vm_lab, inventory, both_passed, from_no_baselines)
        bandwidth, latency = _by_subject(first, "rail"), _by_subject(first, "latency")
        assert sorted(bandwidth) == rails and sorted(latency) == rails, first["gates"]
        for subject in rails:
            rail, lat = bandwidth[subject], latency[subject]
            assert rail["passed"] and rail["measured"] > 0.002 and rail["unit"] == "Gb/s", rail
            assert rail["details"]["memory"] == {end: "host memory (no GPU)" for end in subject.split(" -> ")}
            assert rail["baseline"]["value"] == rail["measured"] and "baseline recorded" in rail["reason"]
            assert lat["passed"] and lat["unit"] == "µs" and lat["measured"] >= lat["details"]["t_typical_us"], lat
            assert lat["reason"].startswith(f"p99 {lat['measured']:g} µs <= 100000 µs = gates.latency.max_p99_us")
        # both rails of the pair ran at once: one pair test, one duration
        assert bandwidth[rails[0]]["duration_s"] == bandwidth[rails[1]]["duration_s"]
        for node in ("node1", "node2"):
            assert vm_lab.ssh(node, "pgrep -a ib_write || true").stdout.strip() == ""

        # rail 1's recorded past made a hundred times the faster rail's figure today (as if its
        # link had degraded since): it still clears the floor, and is flagged below its own
        # baseline. Ten times rail 1's own figure was not enough: with the other e2e tests beside
        # the lab, one rail measured 0.015 Gb/s, then 0.075 (only 51 % below; seen in CI).
        # Policing the link to a fraction of its past did not do here: RC over a policed rxe link
        # stalls on its retransmits and measured 0 Gb/s (seen in CI).
        path = baseline_file(yaml.safe_load(open(inventory))["cluster"]["name"])
        stored = json.loads(path.read_text())
        past = 100 * max(bandwidth[subject]["measured"] for subject in rails)
        stored["parts"][f"rail {rails[1]}"]["baseline"] = past
        path.write_text(json.dumps(stored))
        _, drifted = _gates_until(
            vm_lab, inventory, lambda result: _by_subject(result, "rail")[rails[1]]["passed"], rails_up
        )
        rail1 = _by_subject(drifted, "rail")[rails[1]]
        assert rail1["passed"] and rail1["status"] == "warn" and rail1["baseline"]["drift"], rail1
        assert "below its baseline" in rail1["reason"] and "gates.baseline.max_drop 60%" in rail1["reason"]

        # rail 1 policed under the floor: that HCA fails, the other passes
        def policed() -> None:
            rails_up()
            assert vm_lab.ssh("node1", police + "rate 1mbit burst 32k drop").returncode == 0

        code, broken = _gates_until(
            vm_lab, inventory, lambda result: _by_subject(result, "rail")[rails[0]]["passed"], policed
        )
        bandwidth = _by_subject(broken, "rail")
        assert code == 4 and not bandwidth[rails[1]]["passed"] and bandwidth[rails[0]]["passed"], bandwidth
        assert "< 0.002 Gb/s = gates.rail.min_gbps" in bandwidth[rails[1]]["reason"]
    finally:
        for node in ("node1", "node2"):
            vm_lab.ssh(node, "tc qdisc del dev mv0 ingress; rdma link del rxe1; ip link del mv0")


def test_a_failed_cluster_gate_in_apply_runs_the_diagnosis(vm_lab, tmp_path):
    """An all_reduce threshold no lab can reach fails the cluster gate; apply then diagnoses on
    its own: the pair test (ib_write_bw) clears both nodes, so the fault is not one node's. The
    exit code stays 4; --no-diagnose leaves the diagnosis out."""
    gates = {"ib_write_bw": {"enabled": True}, "all_reduce": {"enabled": True, "min_busbw_gbs": 1000, "retries": 0}}
    inventory = _gates_only(vm_lab, tmp_path, "impossible.yaml", ["rxe0"], gates)

    def pair_test_measured(result: dict) -> bool:  # not stalled by the emulation (_gates_until)
        diagnosis = result.get("diagnosis") or {}
        tests = diagnosis.get("tests") or []
        return bool(tests) and not diagnosis.get("lost") and all(t["passed"] for t in tests)

    code, result = _gates_until(vm_lab, inventory, pair_test_measured, verb=("apply",))
    [all_reduce] = [g for g in result["gates"] if g["gate"] == "all_reduce"]
    assert code == 4 and not all_reduce["passed"] and "< 1000 GB/s" in all_reduce["reason"], all_reduce
    diagnosis = result["diagnosis"]
    found = (diagnosis["suspects"], diagnosis["cleared"], diagnosis["rounds"])
    assert found == ({}, ["node1", "node2"], 1), diagnosis
    assert [t["subject"] for t in diagnosis["tests"]] == ["node1 -> node2"]
    # (apply's table with the diagnosis is the unit tier's, test_cli.py; here until 2026-11-28)
    code, quiet = rdmaprov_json("verify", inventory, "--gates", "--no-diagnose", timeout=900)
    assert code == 4 and "diagnosis" not in quiet


def test_the_site_workload_runs_as_one_job_and_its_figure_transport_and_failure_are_judged(vm_lab, tmp_path):
    """The gates' MPI probe as the site's own workload: mpirun launches it across both VMs inside
    the site's shell line, each process told its place; its 4 MiB time is read by the inventory's
    pattern and held to a max. The probe does not use NCCL: with require_rdma on, the same run
    fails for want of NCCL's transport lines; a command that fails is named with its log's end."""
    place = 'echo "place $RDMAPROV_NODE_RANK of $RDMAPROV_NNODES rank $RDMAPROV_RANK via $RDMAPROV_MASTER_ADDR"'
    command = f"{place}; exec {PROBE_BINARY} 1048576 4194304"
    time_4m = {"pattern": '"size": 4194304,.*"time_us": (?P<value>[0-9.]+)', "unit": "us", "better": "lower"}
    workload = {"command": command, "figure": {**time_4m, "max": 60_000_000}, "require_rdma": False}
    inventory = _gates_only(vm_lab, tmp_path, "workload.yaml", ["rxe0"], {"workload": workload})
    code, result = rdmaprov_json("verify", inventory, "--gates", timeout=900)
    [gate] = [g for g in result["gates"] if g["gate"] == "workload"]
    assert code == 0 and gate["status"] == "pass" and gate["subject"] == "node1,node2", gate
    assert gate["unit"] == "us" and 0 < gate["measured"] < 60_000_000 and gate["details"]["figures"], gate
    assert gate["details"]["processes"] == 2 and gate["details"]["via"] == "ssh", gate["details"]
    assert "sh -c" in gate["details"]["command"] and "the one match" in gate["reason"], gate

    places = {"pattern": r"place (?P<value>[0-9]+) of 2 rank [01] via [0-9.]+$", "unit": "node", "take": "max"}
    workload = {"command": command, "figure": places}
    inventory = _gates_only(vm_lab, tmp_path, "nccl.yaml", ["rxe0"], {"workload": workload})
    data = yaml.safe_load(open(inventory))  # and the framework probe in the VMs' own python3
    data["defaults"].setdefault("nccl", {})["frameworks"] = ["/usr/bin/python3"]
    Path(inventory).write_text(yaml.safe_dump(data, sort_keys=False))
    code, result = rdmaprov_json("verify", inventory, "--gates", timeout=900)
    [gate] = [g for g in result["gates"] if g["gate"] == "workload"]
    assert code == 4 and gate["measured"] == 1 and sorted(gate["details"]["figures"]) == [0, 1], gate
    assert "no NCCL line says which network it used" in gate["reason"], gate
    for host in result["verify"]:
        [framework] = [f for f in host["findings"] if f["id"] == "nccl.framework"]
        assert not framework["ok"] and framework["subject"] == "/usr/bin/python3", framework
        assert framework["found"] == "cannot tell: ModuleNotFoundError: No module named 'torch'", framework

    broken = {"command": "echo loading the model; echo 'no such file: model.pt' >&2; exit 3", "require_rdma": False}
    inventory = _gates_only(vm_lab, tmp_path, "broken.yaml", ["rxe0"], {"workload": broken})
    code, result = rdmaprov_json("verify", inventory, "--gates", timeout=900)
    [gate] = [g for g in result["gates"] if g["gate"] == "workload"]
    # mpirun printed its box with the exit code in some lab runs and not in others: either is right
    reason = gate["reason"].replace(" (a process exited 3)", "")
    assert code == 4 and reason == "mpirun from node1 exited with an error: loading the model | no such file: model.pt"


def test_a_softroce_inventory_from_before_the_rail_and_latency_gates_still_passes(vm_lab, tmp_path, monkeypatch):
    """It sets only ib_write_bw's floor, and the rail and latency gates are on by default: the
    rail takes that floor, and the latency gate, with no SoftRoCE default, is skipped unrun."""
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path / "state"))
    data = yaml.safe_load(open(vm_lab.inventory))
    data["cluster"]["gates"] = {"ib_write_bw": {"min_gbps": 0.01, "duration_s": 3}, "all_reduce": {"enabled": False}}
    older = tmp_path / "older.yaml"
    older.write_text(yaml.safe_dump(data, sort_keys=False))
    code, result = rdmaprov_json("verify", str(older), "--gates", timeout=900)
    [rail] = _by_subject(result, "rail").values()
    [latency] = _by_subject(result, "latency").values()
    assert code == 0 and rail["passed"] and "= gates.ib_write_bw.min_gbps 0.01 Gb/s" in rail["reason"], rail
    assert latency["status"] == "skipped" and latency["duration_s"] < 5, latency  # nothing ran
    assert "no p99 default for softroce: set cluster.gates.latency.max_p99_us" in latency["reason"]


def _with_build(vm_lab, tmp_path, version: str, base: str | None = None) -> str:
    """The lab inventory (or `base`) plus a declared build of the probe's C source, packed as a
    site would keep it."""
    from rdmaprov.deploys.gate_tools import probe_source

    tarball = tmp_path / f"site-probe-{version}.tar.gz"
    if not tarball.exists():
        src = tmp_path / f"site-probe-{version}"
        src.mkdir()
        (src / "allreduce_probe.c").write_text(probe_source())
        subprocess.run(["tar", "-C", str(tmp_path), "-czf", str(tarball), src.name], check=True)
    data = yaml.safe_load(open(base or vm_lab.inventory))
    data.setdefault("defaults", {})["builds"] = [
        {
            "name": "site-probe",
            "version": version,
            "source": {"kind": "file", "path": str(tarball)},
            "build": 'mkdir -p "$STAGE/bin" && mpicc -O2 -o "$STAGE/bin/allreduce_probe" allreduce_probe.c',
        }
    ]
    path = tmp_path / f"with-build-{version}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_a_declared_build_is_compiled_on_one_vm_shipped_and_rebuilt_once_per_version(vm_lab, tmp_path):
    builders = []
    for version in ("1.0", "1.0", "1.1"):
        code, result = rdmaprov_json(
            "apply",
            _with_build(vm_lab, tmp_path, version),
            "--tags",
            "builds",
            "--skip-verify",
            "--skip-gates",
            timeout=900,
        )
        steps = {h["name"]: {op["name"]: op["status"] for op in h["ops"]} for h in result["hosts"]}
        builders.append([h for h, s in steps.items() if s["builds | build site-probe built"] == "changed"])
        installed = [h for h, s in steps.items() if s["builds | build site-probe installed"] == "changed"]
        assert code == (0 if builders[-1] == [] else 2), result
        assert installed == ([] if code == 0 else ["node1", "node2"])
        # the shipped binary is the one mpirun starts on both VMs: a real MPI allreduce across them
        run = vm_lab.ssh(
            "node1",
            "mpirun --allow-run-as-root -np 2 -H node1,node2 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "
            "eth0 "
            "--mca oob_tcp_if_include eth0 /opt/site-probe/current/bin/allreduce_probe 1024 4096 < /dev/null",
            timeout=300,
        )
        assert run.returncode == 0 and '"wrong": 0' in run.stdout, run.stderr
    assert builders == [["node1"], [], ["node1"]]  # built once, nothing rebuilt, rebuilt once for the new version
    versions = vm_lab.ssh("node2", "ls /opt/site-probe; readlink /opt/site-probe/current").stdout.split()
    assert len(versions) == 4 and versions[-1].startswith("1.1-") and versions[0].startswith("1.0-")
    assert vm_lab.ssh("node2", "test -e /var/cache/rdmaprov/build || echo never-built").stdout.strip() == "never-built"


@pytest.mark.lab_pair
def test_verify_names_a_deleted_rxe_link_and_apply_restores_it(vm_lab):
    assert vm_lab.ssh("node2", "rdma link del rxe0").returncode == 0
    code, result = rdmaprov_json("verify", vm_lab.inventory, timeout=300)
    assert code == 4, result
    failed = {v["name"]: [f for f in v["findings"] if not f["ok"]] for v in result["verify"]}
    assert failed["node1"] == []
    assert [(f["subject"], f["check"], f["found"]) for f in failed["node2"]][0] == ("rxe0", "device present", "missing")
    human = rdmaprov("verify", vm_lab.inventory, timeout=300)
    assert human.returncode == 4 and "node2" in human.stdout and "rxe0" in human.stdout and "FAIL" in human.stdout
    code, _ = rdmaprov_json("apply", vm_lab.inventory, "--skip-gates", timeout=600)
    assert code == 2
    assert rdmaprov("verify", vm_lab.inventory, timeout=300).returncode == 0


def _would_change(host: dict) -> dict[str, str]:
    return {op["name"]: op["drift"] for op in host["ops"] if op["status"] == "would_change"}


@pytest.mark.lab_pair
def test_check_finds_corrective_intentional_and_fact_drift_on_the_lab(vm_lab, tmp_path):
    code, clean = rdmaprov_json("check", vm_lab.inventory, timeout=600)
    assert code == 0, [(h["name"], _would_change(h)) for h in clean["hosts"]] + [
        v for v in clean["verify"] if v["status"] != "ok"
    ]
    assert all(v["status"] == "ok" for v in clean["verify"]) and all(h["last_applied"] for h in clean["hosts"])

    # A hand edit on node1 and a deleted rxe link on node2: the node moved, so both are corrective.
    vm_lab.ssh("node1", "sed -i 's/NCCL_DEBUG=WARN/NCCL_DEBUG=TRACE/' /etc/nccl.conf")
    assert vm_lab.ssh("node2", "rdma link del rxe0").returncode == 0
    code, drift = rdmaprov_json("check", vm_lab.inventory, timeout=600)
    assert code == 6, drift  # would-be changes, and facts that no longer hold
    hosts = {h["name"]: h for h in drift["hosts"]}
    assert _would_change(hosts["node1"]) == {"nccl_env | Write /etc/nccl.conf": "corrective"}
    assert "+NCCL_DEBUG=WARN" in next(op["diff"] for op in hosts["node1"]["ops"] if op["status"] == "would_change")
    assert set(_would_change(hosts["node2"]).values()) == {"corrective"} and any(
        "rxe" in name for name in _would_change(hosts["node2"])
    )
    facts = {v["name"]: [f for f in v["findings"] if not f["ok"]] for v in drift["verify"]}
    assert facts["node1"] == []
    assert ("rxe0", "device present", "corrective") in [(f["subject"], f["check"], f["drift"]) for f in facts["node2"]]
    assert "NCCL_DEBUG=TRACE" in vm_lab.ssh("node1", "cat /etc/nccl.conf").stdout  # check changed nothing
    human = rdmaprov("check", vm_lab.inventory, timeout=600)
    assert "node1: nccl_env | Write /etc/nccl.conf: would change (corrective)" in human.stdout
    assert "device present (corrective)" in human.stdout

    # The inventory moves on (NCCL_DEBUG INFO) and one node is down: intentional drift, exit 4 for the dead node.
    prefix = vm_lab.subnet.rsplit(".", 1)[0]
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        open(vm_lab.inventory)
        .read()
        .replace("NCCL_DEBUG: WARN", "NCCL_DEBUG: INFO")
        .replace("connect_timeout: 30", "connect_timeout: 5")
        + f"      node9:\n        address: {prefix}.19\n"
    )
    code, moved = rdmaprov_json("check", str(changed), "--limit", "node1,node9", timeout=600)
    hosts = {h["name"]: h for h in moved["hosts"]}
    assert code == 6 and hosts["node9"]["status"] == "unreachable"
    assert _would_change(hosts["node1"])["nccl_env | Write /etc/nccl.conf"] == "intentional"
    # node9 joined the inventory too: the trust set changed as well as NCCL's settings
    assert hosts["node1"]["inputs_changed"] == ["ssh_trust", "nccl_env"]

    code, _ = rdmaprov_json("apply", vm_lab.inventory, "--skip-gates", timeout=600)
    assert code == 2
    assert rdmaprov("check", vm_lab.inventory, timeout=600).returncode == 0


# RDMA-CM's default ToS of the lab's RoCE port (configfs).
TOS_FILE = "/sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos"


def _qos_inventory(vm_lab, tmp_path, name: str, **node) -> str:
    """The lab cluster with roce_qos dcqcn and the ib_write_bw gate alone; `node` settings on top."""
    path = _gates_only(vm_lab, tmp_path, name, ["rxe0"], {"ib_write_bw": {"enabled": True}})
    data = yaml.safe_load(open(path))
    data["defaults"].update({"roce_qos": {"profile": "dcqcn"}, **node})
    (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _qos_findings(result: dict) -> dict[str, list[tuple[str, str, bool, str]]]:
    return {
        v["name"]: [(f["id"], f["subject"], f["ok"], f["found"]) for f in v["findings"] if f["id"].startswith("roce.")]
        for v in result["verify"]
    }


def test_roce_qos_puts_the_declared_class_on_the_wire_and_check_names_a_node_off_it(vm_lab, tmp_path):
    inventory = _qos_inventory(vm_lab, tmp_path, "qos.yaml")
    # the deploys that read roce_qos: the chain, NCCL's class, and node-check's expectations
    tags = "roce_qos,nccl_env,node_check"
    restored = False
    try:
        code, applied = rdmaprov_json("apply", inventory, "--tags", tags, "--skip-gates", timeout=600)
        assert code == 2, [(h["name"], h["error"]) for h in applied["hosts"]]
        for node in ("node1", "node2"):
            assert vm_lab.ssh(node, f"cat {TOS_FILE}").stdout.strip() == "106"
            conf = vm_lab.ssh(node, "cat /etc/nccl.conf").stdout
            assert "NCCL_IB_TC=106" in conf and "NCCL_IB_SL=3" in conf, conf
        dcb = "not applicable: SoftRoCE runs on NICs without DCB (no PFC, no DSCP trust, no DCQCN)"
        expected = [("roce.dcb", "NICs", True, dcb), ("roce.tos", "rxe0 port 1", True, "106")]
        assert _qos_findings(applied) == {node: expected for node in ("node1", "node2")}

        # On the lab bridge, every RoCE v2 packet of the gate carries DSCP 26 with ECN-capable (ToS 106).
        with roce_classes(vm_lab.bridge) as seen:
            code, gated = _gates_until(vm_lab, inventory, lambda result: all(g["passed"] for g in result["gates"]))
        assert code == 0, gated["gates"]
        assert sum(seen.values()) > 100 and set(seen) == {106}, seen
        classes = [g["details"]["traffic_class"] for g in gated["gates"] if g["gate"] == "ib_write_bw"]
        assert classes and set(classes) == {106}, gated["gates"]

        # A node whose ToS was changed by hand: check names it as corrective drift; apply sets it back.
        assert vm_lab.ssh("node2", f"echo 0 > {TOS_FILE}").returncode == 0
        code, drift = rdmaprov_json("check", inventory, timeout=600)
        assert code == 6, drift
        hosts = {h["name"]: h for h in drift["hosts"]}
        assert (_would_change(hosts["node1"]), _would_change(hosts["node2"])) == (
            {},
            {"roce_qos | RoCE QoS now": "corrective"},
        )
        facts = {
            v["name"]: [(f["id"], f["found"], f["drift"]) for f in v["findings"] if not f["ok"]]
            for v in drift["verify"]
        }
        assert facts == {"node1": [], "node2": [("roce.tos", "0", "corrective")]}
        code, _ = rdmaprov_json("apply", inventory, "--tags", "roce_qos", "--skip-gates", timeout=600)
        assert code == 2 and vm_lab.ssh("node2", f"cat {TOS_FILE}").stdout.strip() == "106"

        # Declared as RoCE over the VMs' virtio NICs: DCB is read and found missing, never a pass.
        roce = _qos_inventory(vm_lab, tmp_path, "roce.yaml", fabric="roce")
        code, result = rdmaprov_json("verify", roce, timeout=600)
        assert code == 4
        nic = [f for f in _qos_findings(result)["node1"] if f[0] in ("roce.trust", "roce.pfc", "roce.dscp_map")]
        assert len(nic) == 3 and all(
            not ok and found.endswith("has no DCB (dcb: Attribute read: Operation not supported)")
            for _, _, ok, found in nic
        ), nic

        # Off again: the boot unit goes, and the ToS is put back by hand (off leaves QoS as it is).
        code, _ = rdmaprov_json("apply", vm_lab.inventory, "--tags", tags, "--skip-gates", timeout=600)
        assert code == 2
        for node in ("node1", "node2"):
            assert vm_lab.ssh(node, "rmdir /sys/kernel/config/rdma_cm/rxe0").returncode == 0
            assert vm_lab.ssh(node, "test -e /etc/systemd/system/rdmaprov-roce-qos.service").returncode == 1
        restored = True
    finally:
        if not restored:  # later tests share the lab: a failure here must not leave QoS behind
            rdmaprov("apply", vm_lab.inventory, "--tags", tags, "--skip-gates", timeout=600)
            for node in ("node1", "node2"):
                vm_lab.ssh(node, "rmdir /sys/kernel/config/rdma_cm/rxe0 2>/dev/null || true")


@pytest.mark.lab_pair
def test_gate_with_a_failing_or_unreachable_peer_fails_clearly_and_leaves_no_server(vm_lab, tmp_path):
    """The ib_write_bw and all_reduce gates alone (the rail and latency gates start their servers
    the same way, and ran here too until 2026-11-29, when they went for CI's time)."""
    gates = {"ib_write_bw": {"enabled": True}, "all_reduce": {"enabled": True}}
    inventory = _gates_only(vm_lab, tmp_path, "broken.yaml", ["rxe0"], gates, connect_timeout=5)
    data = yaml.safe_load(open(inventory))
    hosts = data["groups"]["nodes"]["hosts"]
    # node2's client is pointed at a device it lacks; node9 does not exist on the bridge.
    hosts["node2"]["vars"] = {"rdma": {"devices": ["rxe9"]}}
    hosts["node9"] = {"address": vm_lab.subnet.rsplit(".", 1)[0] + ".19"}
    Path(inventory).write_text(yaml.safe_dump(data, sort_keys=False))
    code, result = rdmaprov_json("verify", str(inventory), "--gates", timeout=600)
    assert code == 4
    gates = {(g["gate"], g["subject"]): g for g in result["gates"]}
    assert not gates[("ib_write_bw", "node1 -> node2")]["passed"]
    assert "ib_write_bw on node2 gave no result" in gates[("ib_write_bw", "node1 -> node2")]["reason"]
    assert gates[("ib_write_bw", "node2 -> node9")]["reason"].startswith("node9 is unreachable")
    assert "node9" in gates[("all_reduce", "node1,node2,node9")]["reason"]
    for node in ("node1", "node2"):
        assert vm_lab.ssh(node, "pgrep -a ib_write_bw || true").stdout.strip() == ""


def test_sixteen_containers_answer_ssh_and_down_leaves_nothing(tmp_path_factory):
    from tests.support.lab import TestLab

    # a short folder: tmp_path's is too deep for `lab ssh`'s socket (lab/sshshare.py)
    lab = TestLab(tmp_path_factory.mktemp("c16"), "container", 16, "c")
    try:
        lab.up()
        status = rdmaprov("lab", "--dir", str(lab.dir), "status", "--json")
        rows = json.loads(status.stdout)
        assert len(rows) == 16 and all(r["running"] and r["ssh"] for r in rows)
        for node in ("node1", "node16"):
            proc = lab.ssh(node, "hostname")
            assert proc.returncode == 0 and proc.stdout.strip() == node
            # `lab ssh` left the node's shared connection open for the next command: down ends it
            assert (lab.dir / "nodes" / node / "ssh.sock").is_socket()
    finally:
        down = lab.down()
    assert down.returncode == 0
    assert lab.leftovers() == []  # no process of the lab: the shared connections' ssh included


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
    used = str(ssh_farm.network)
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

    proc = subprocess.run(
        [sys.executable, "-m", "rdmaprov", "lab", "--dir", str(tmp_path / "lab"), "up"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=env_path),
    )
    assert proc.returncode == 1
    assert "apt-get install qemu-system-x86 qemu-utils" in proc.stderr


def _scrape(address: str) -> dict[str, float]:
    """Every sample the node's exporter serves, after promtool (Prometheus' linter) found its
    names, units and types clean on the node's real sysfs."""
    import requests

    text = requests.get(f"http://{address}:9879/metrics", timeout=30).text
    assert promtool_check(text) == (0, "")
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_exporter_is_scraped_over_the_bridge_and_counters_grow_with_traffic(vm_lab, tmp_path):
    prefix = vm_lab.subnet.rsplit(".", 1)[0]
    assert vm_lab.ssh("node1", "systemctl show -p User --value rdmaprov-exporter").stdout.strip() == "rdmaprov-exporter"
    before = {node: _scrape(f"{prefix}.{11 + i}") for i, node in enumerate(("node1", "node2"))}
    labels = '{device="rxe0",port="1"}'
    assert before["node1"][f"rdma_port_state{labels}"] == 4.0
    assert before["node1"][f"rdma_port_active{labels}"] == 1.0
    rate = float(vm_lab.ssh("node1", "cut -d' ' -f1 /sys/class/infiniband/rxe0/ports/1/rate").stdout)
    assert before["node1"][f"rdma_port_rate_bytes_per_second{labels}"] == rate * 1e9 / 8  # Gb/s in bytes/s
    assert f"rdma_hw_counters_sent_pkts_total{labels}" in before["node2"]
    assert "rdma_exporter_read_errors_total" in before["node1"]
    # traffic from ib_write_bw alone (the other gates would add minutes and no other counter)
    traffic = _gates_only(vm_lab, tmp_path, "traffic.yaml", ["rxe0"], {"ib_write_bw": {"enabled": True}})
    code, result = rdmaprov_json("verify", traffic, "--gates", timeout=600)
    assert code == 0, result["gates"]
    assert any(f["check"] == "exporter answers" and f["ok"] for v in result["verify"] for f in v["findings"])
    after = {node: _scrape(f"{prefix}.{11 + i}") for i, node in enumerate(("node1", "node2"))}
    # ib_write_bw node2 (client) -> node1 (server): node2 sent, node1 received
    assert (
        after["node2"][f"rdma_hw_counters_sent_pkts_total{labels}"]
        > before["node2"][f"rdma_hw_counters_sent_pkts_total{labels}"]
    )
    assert (
        after["node1"][f"rdma_hw_counters_rcvd_pkts_total{labels}"]
        > before["node1"][f"rdma_hw_counters_rcvd_pkts_total{labels}"]
    )


def _wait_for(predicate, timeout_s: float, every_s: float = 2.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


def test_bootstrap_brings_a_third_vm_in_even_after_an_interrupted_first_try(vm_lab):
    """node3 is a bare Debian 13 node, node1 and node2 converged Debian 12 ones. The first bootstrap
    is killed while it installs packages on node3; the second one converges it from the mirror's
    trixie suite, renews trust on node1 and node2, and gates node3 against them: ib_write_bw across
    the two releases passes, while one MPI job cannot span Open MPI 4.1 and 5.0 and the all_reduce
    gate says so."""
    import os
    import signal
    import sys

    from tests.conftest import REPO

    full = vm_lab.full_inventory
    first = subprocess.Popen(
        [sys.executable, "-m", "rdmaprov", "bootstrap", full, "--limit", "node3", "--skip-gates"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        installing = _wait_for(
            lambda: vm_lab.ssh("node3", "pgrep -x dpkg || pgrep -x apt-get", timeout=60).returncode == 0, 600
        )
    finally:
        os.kill(first.pid, signal.SIGKILL)  # a killed apply: no cleanup of any kind runs
        first.wait()
    assert installing, "bootstrap never reached the package install on node3"

    code, result = rdmaprov_json("bootstrap", full, "--limit", "node3", timeout=1800)
    hosts = {h["name"]: h for h in result["hosts"]}
    gates = _stalled_lanes_rerun(vm_lab, full, result["gates"])
    assert result["command"] == "bootstrap"
    # changes made (2), and a gate failed (4): the all_reduce across the releases, and only it
    assert code == 6, (
        [(h["name"], h["status"], h["error"]) for h in result["hosts"]],
        [v for v in result["verify"] if v["status"] != "ok"],
        gates,
    )
    assert hosts["node3"]["status"] == "changed", hosts["node3"]["error"]
    # old nodes: only SSH trust ran there, and it changed (they now trust and know node3)
    for old in ("node1", "node2"):
        assert {op["deploy"] for op in hosts[old]["ops"]} == {"ssh_trust"}
        assert "SSH trust: authorized_keys" in [
            op["name"].split(" | ")[-1] for op in hosts[old]["ops"] if op["status"] == "changed"
        ]
    assert [v["name"] for v in result["verify"]] == ["node3"] and result["verify"][0]["status"] == "ok"
    assert gates[("ib_write_bw", "node1 -> node3")]["passed"], gates  # Debian 12 <-> Debian 13 over rxe
    mixed = gates[("all_reduce", "node1,node2,node3")]
    assert [subject for (_, subject), g in gates.items() if not g["passed"]] == ["node1,node2,node3"], gates
    assert re.match(
        r"one MPI job cannot span these nodes: Open MPI 4\.1\.\d+ on node1, node2; Open MPI 5\.0\.\d+ on node3\. ",
        mixed["reason"],
    ), mixed
    assert sorted(mixed["details"]["mpi"]) == ["node1", "node2", "node3"]

    # node3 runs Debian 13's own stack, from the mirror's trixie suite, on trixie-backports' kernel
    assert vm_lab.ssh("node3", "uname -r").stdout.startswith("7.")
    assert vm_lab.ssh("node3", "dpkg-query -W -f '${Version}' rdma-core").stdout.startswith("56.")
    assert re.search(r"/debian trixie main", vm_lab.ssh("node3", "cat /etc/apt/sources.list.d/*.list").stdout)
    assert "PORT_ACTIVE" in vm_lab.ssh("node3", "ibv_devinfo -d rxe0").stdout

    key3 = vm_lab.ssh("node3", "cat /root/.ssh/id_ed25519.pub").stdout.split()[1]
    for old in ("node1", "node2"):
        assert key3 in vm_lab.ssh(old, "cat /root/.ssh/authorized_keys").stdout
        assert "node3" in vm_lab.ssh(old, "cat /etc/ssh/ssh_known_hosts").stdout
    mca = "--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
    # Open MPI 5 takes the gate's options; trust lets node3's mpirun reach node1 without a prompt,
    # but Open MPI 4 there has no PRRTE daemon to start: the gate's refusal is what mpirun meets
    alone = vm_lab.ssh("node3", f"mpirun --allow-run-as-root -np 1 -H node3 {mca} hostname < /dev/null", timeout=300)
    assert alone.returncode == 0 and alone.stdout.split() == ["node3"], alone.stderr
    across = vm_lab.ssh(
        "node3", f"mpirun --allow-run-as-root -np 2 -H node3,node1 {mca} hostname < /dev/null", timeout=300
    )
    assert across.returncode != 0 and "Host key verification failed" not in across.stdout + across.stderr
    # (an apply of all three changing nothing: the Open MPI test's last step, the whole stack with
    # the site's MPI in place of Debian's Open MPI packages; run here as well until 2026-11-28,
    # when it went for CI's time)


def _sees_rxe_memlock_and_nccl(node: str, inside: subprocess.CompletedProcess) -> None:
    """What a job's container printed for `ulimit -l; ls /dev/infiniband; ibv_devices; env`: locked
    memory unlimited, the RDMA devices, rxe0 and the node's NCCL variables."""
    assert inside.returncode == 0, (node, inside.stderr)
    lines = inside.stdout.splitlines()
    assert lines[0] == "unlimited" and {"uverbs0", "rdma_cm"} <= set(lines), (node, lines)
    assert "rxe0" in inside.stdout and "NCCL_IB_HCA=rxe" in lines, (node, lines)


# Each VM its own runtime: both runtimes' deploys and both ends of the container gate run in one
# apply and one gate, where a test per runtime took about two minutes more of CI (issue 30).
# Docker on node3, bootstrapped by then: Debian 13's docker.io, Debian 12's podman.
RUNTIMES = {"node1": {"runtime": "podman", "cdi": True}, "node3": {"runtime": "docker"}}


def _with_runtimes(data: dict, runtimes: dict[str, dict]) -> dict:
    """The inventory's data with only the nodes in `RUNTIMES`, each with its own containers
    section (with none where `runtimes` does not name it)."""
    hosts = data["groups"]["nodes"]["hosts"]
    for name in list(hosts):
        if name not in RUNTIMES:
            del hosts[name]
            continue
        hosts[name].pop("vars", None)  # the lab's hosts have no vars of their own
        if name in runtimes:
            hosts[name]["vars"] = {"containers": runtimes[name]}
    return data


def test_podman_and_docker_jobs_get_rxe_memlock_and_nccl_settings_and_carry_the_container_gate(vm_lab, tmp_path):
    """containers.runtime podman on node1 (Debian 12, with containers.cdi) and docker on node3
    (Debian 13), each from the lab's mirror: rdmaprov's containers.conf drop-in on node1; on node3
    rdmaprov-docker-run and
    rdmaprov's keys in daemon.json beside a key of the site's own, which stays through apply and
    removal. A job's container, started with no flags on podman and by rdmaprov-docker-run on
    docker, sees rxe0, may pin memory and has the node's NCCL variables. The container gate runs
    ib_write_bw between a podman and a docker container over SoftRoCE and passes, with the rail's
    p99 in the image too, leaves no container behind, and names what a podman container lacked
    (its device, or its memlock); a daemon.json that is not JSON stops node3's apply, naming the
    file. With containers.cdi, the CDI spec node1 made gives a container rxe0 by its CDI name
    where the drop-in gives none, and udev makes it again. (Every rail of a pair in the image, a
    verdict per HCA, and what a docker container lacked, from outputs captured on these VMs, are
    the unit tier's.)"""
    data = _with_runtimes(yaml.safe_load(open(vm_lab.full_inventory)), RUNTIMES)
    inventory = tmp_path / "containers.yaml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    daemon = "/etc/docker/daemon.json"
    site = {"log-opts": {"max-size": "10m"}}
    site_file = f"mkdir -p /etc/docker && echo {shlex.quote(json.dumps(site))} > {daemon}"
    assert vm_lab.ssh("node3", site_file).returncode == 0
    try:
        code, first = rdmaprov_json("apply", str(inventory), "--tags", "containers", "--skip-verify", timeout=900)
        assert code == 2 and {h["status"] for h in first["hosts"]} == {"changed"}, first["hosts"]
        code, again = rdmaprov_json("apply", str(inventory), "--tags", "containers", "--skip-verify", timeout=600)
        assert code == 0 and {h["status"] for h in again["hosts"]} == {"unchanged"}, again["hosts"]
        merged = json.loads(vm_lab.ssh("node3", f"cat {daemon}").stdout)
        assert merged == {**site, "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}
        made = vm_lab.ssh_each(
            list(RUNTIMES),
            f"if command -v docker; then bash -c {shlex.quote(image_script('docker'))}; "
            f"else bash -c {shlex.quote(image_script())}; fi",
        )
        assert all(m.returncode == 0 for m in made.values()), {n: m.stderr for n, m in made.items()}
        look = f"--rm --pull=never {IMAGE} sh -c 'ulimit -l; ls /dev/infiniband; ibv_devices; env'"
        for node, run in (("node1", "podman run"), ("node3", "rdmaprov-docker-run")):
            _sees_rxe_memlock_and_nccl(node, vm_lab.ssh(node, f"{run} {look}"))
        _container_gate_passes_and_names_what_a_container_lacked(vm_lab, tmp_path, inventory)
        assert vm_lab.ssh("node3", "docker ps -aq").stdout.split() == []  # each lane's container went with it
        _own_netns_containers_get_rdma_moved_in_where_the_kernel_can(vm_lab, data)
        # a daemon.json dockerd could not read either stops node3's apply, naming the file
        broken = vm_lab.ssh("node3", f"cp {daemon} /root/daemon.json && echo '{{\"log-opts\": ' > {daemon}")
        assert broken.returncode == 0, broken.stderr
        code, refused = rdmaprov_json("apply", str(inventory), "--tags", "containers", "--skip-verify", timeout=600)
        node3 = {h["name"]: h for h in refused["hosts"]}["node3"]
        assert code == 4 and node3["status"] == "failed", refused["hosts"]
        assert f"{daemon} is not valid JSON" in node3["error"] and "fix it or remove it" in node3["error"], node3
    finally:  # the next tests' applies expect no runtime of rdmaprov's: a failure here must not fail them too
        vm_lab.ssh("node3", f"test -e /root/daemon.json && mv /root/daemon.json {daemon}")
        inventory.write_text(yaml.safe_dump(_with_runtimes(data, {}), sort_keys=False))
        code, _ = rdmaprov_json("apply", str(inventory), "--tags", "containers", "--skip-verify", timeout=600)
    assert code == 2 and vm_lab.ssh("node1", "ls /etc/containers/containers.conf.d").stdout.strip() == ""
    left = vm_lab.ssh("node1", "ls /etc/cdi /usr/local/sbin/rdmaprov-cdi-rdma /etc/udev/rules.d/70-rdmaprov-cdi.rules")
    assert left.stdout.strip() == "/etc/cdi:" and left.stderr.count("No such file") == 2, (left.stdout, left.stderr)
    assert json.loads(vm_lab.ssh("node3", f"cat {daemon}").stdout) == site
    gone = vm_lab.ssh("node3", "ls /usr/local/bin/rdmaprov-docker-run /usr/local/sbin/rdmaprov-rdma-netns")
    assert gone.stderr.count("No such file") == 2, (gone.stdout, gone.stderr)


OWN_NETNS = "ownnet"  # the namespace, its macvlan (ownnet0) and its SoftRoCE device (rxe_ownnet)


def _own_netns_containers_get_rdma_moved_in_where_the_kernel_can(vm_lab, data: dict) -> None:
    """netns_mode exclusive, containers with a network of their own (docs/training-jobs.md).
    node3 boots trixie-backports' kernel (7.3): a docker container that holds a namespace (docker
    run --network none) sees no RDMA device; rdmaprov-rdma-netns gives the namespace a macvlan on
    eth0 with an address and a SoftRoCE device on it; a job's container started in it sees that
    device alone, and its ib_write_bw reaches a podman container on node1 (host network). node1's
    kernel (6.1) cannot move SoftRoCE devices: the helper says so and leaves nothing half done."""
    hosts = data["groups"]["nodes"]["hosts"]
    node1 = hosts["node1"]["address"]
    network = ipaddress.ip_network(vm_lab.subnet)
    address = f"{list(network.hosts())[99]}/{network.prefixlen}"
    device, holder = f"rxe_{OWN_NETNS}", f"rdmaprov-{OWN_NETNS}"
    macvlan = f"ip link add {OWN_NETNS}0 link eth0 type macvlan mode bridge"
    refused = vm_lab.ssh("node1", f"{macvlan} && rdmaprov-rdma-netns {OWN_NETNS} {OWN_NETNS}0")
    assert refused.returncode == 1 and f"cannot move {device} between namespaces" in refused.stderr, refused
    assert "undone" in refused.stderr, refused.stderr
    left = vm_lab.ssh("node1", f"ip netns list; rdma dev; ip -br link show {OWN_NETNS}0 && ip link del {OWN_NETNS}0")
    assert left.returncode == 0 and OWN_NETNS not in left.stdout.replace(f"{OWN_NETNS}0", ""), left.stdout
    job = f"docker run --rm --network container:{holder} --device /dev/infiniband --ulimit memlock=-1:-1 --pull=never"
    try:
        held = vm_lab.ssh(
            "node3",
            f"docker run -d -i --name {holder} --network none --pull=never {IMAGE} sh -c 'read x' >/dev/null && "
            f"ip netns attach {OWN_NETNS} $(docker inspect -f '{{{{.State.Pid}}}}' {holder}) && "
            f"{job} {IMAGE} ib_write_bw -d rxe0 -F -D 2 {node1}",
        )
        # /dev/infiniband is there, but its namespace has no RDMA device: verbs lists none
        assert held.returncode != 0 and "Did not detect devices" in held.stderr, (held.stdout, held.stderr)
        moved = vm_lab.ssh("node3", f"{macvlan} && rdmaprov-rdma-netns {OWN_NETNS} {OWN_NETNS}0 --address {address}")
        assert moved.returncode == 0 and moved.stdout.split() == [device], (moved.stdout, moved.stderr)
        seen = vm_lab.ssh("node3", f"rdma dev; echo --; {job} {IMAGE} ibv_devices")
        host_side, _, inside = seen.stdout.partition("--")
        assert device not in host_side and "rxe0" in host_side, seen.stdout
        assert device in inside and "rxe0" not in inside, seen.stdout
        server = vm_lab.ssh(
            "node1", f"podman run -d --rm --timeout 120 --pull=never {IMAGE} ib_write_bw -d rxe0 -F -D 2"
        )
        assert server.returncode == 0, server.stderr
        client = vm_lab.ssh("node3", f"sleep 3; {job} {IMAGE} ib_write_bw -d {device} -F -D 2 {node1}", timeout=180)
        assert client.returncode == 0 and re.search(r"^ 65536\s+\d+\s+[\d.]+\s+[\d.]+", client.stdout, re.M), client
    finally:
        vm_lab.ssh("node3", f"ip netns delete {OWN_NETNS}; docker rm -f {holder}")
    # the namespace gone, its macvlan and the SoftRoCE device on it went with it
    after = vm_lab.ssh("node3", "sleep 2; rdma dev; ip -br link; ip netns list")
    assert device not in after.stdout and f"{OWN_NETNS}0" not in after.stdout, after.stdout


def _container_gate_inventory(vm_lab, tmp_path, image: str, devices: list[str], latency=False) -> str:
    """The container gate alone (ib_write_bw's pairs and lab bounds kept); with `latency`, the
    latency gate on too (the container gate then holds each rail's p99 in the image to its
    bound; the host's latency gate runs as well). Its bound here is 1 s, failing only a stuck
    lane: beside CI's other tests the host's p99 went above the lab's 100 ms (seen in CI), and
    the lab's latency is the rail test's to judge."""
    stuck = {"latency": {"enabled": True, "max_p99_us": 1000000}}
    gates = {"container": {"image": image}} | (stuck if latency else {})
    path = _gates_only(vm_lab, tmp_path, "container-gate.yaml", devices, gates, base=vm_lab.full_inventory)
    data = yaml.safe_load(open(path))
    lab_gates = yaml.safe_load(open(vm_lab.inventory))["cluster"]["gates"]
    data["cluster"]["gates"]["ib_write_bw"] = {**lab_gates.get("ib_write_bw", {}), "enabled": False}
    Path(path).write_text(yaml.safe_dump(_with_runtimes(data, RUNTIMES), sort_keys=False))
    return path


def _container_gate(vm_lab, tmp_path, image: str) -> tuple[int, list[dict]]:
    """verify --gates with the container gate alone, on rxe0."""
    path = _container_gate_inventory(vm_lab, tmp_path, image, ["rxe0"])
    code, result = rdmaprov_json("verify", path, "--gates", timeout=600)
    return code, [g for g in result["gates"] if g["gate"] == "container"]


def _cdi_gives_rxe0_where_the_drop_in_gives_none(vm_lab) -> None:
    """node1's drop-in has no devices line: a container sees rxe0 only by its CDI name, with the
    node's /etc/nccl.conf. The spec removed, a udev event on the RDMA devices makes it again."""
    look = "ls /dev/infiniband; while read -r line; do echo $line; done < /etc/nccl.conf"  # the image has no cat
    inside = vm_lab.ssh("node1", f"podman run --rm --pull=never --device rdmaprov/rdma=rxe0 {IMAGE} sh -c '{look}'")
    assert inside.returncode == 0, inside.stderr
    lines = inside.stdout.splitlines()
    assert {"uverbs0", "rdma_cm"} <= set(lines) and "NCCL_IB_HCA=rxe" in lines, lines
    spec = "/etc/cdi/rdmaprov-rdma.yaml"
    event = "udevadm trigger --subsystem-match=infiniband_verbs --action=change && udevadm settle"
    again = vm_lab.ssh("node1", f"rm {spec} && {event} && grep -c uverbs0 {spec}")
    assert again.returncode == 0 and again.stdout.split() == ["2"], (again.stdout, again.stderr)


def _container_gate_passes_and_names_what_a_container_lacked(vm_lab, tmp_path, inventory) -> None:
    """The container gate in the image made on the VMs: it passes with rdmaprov's drop-in; with the
    device taken out of node1's drop-in, memlock held low there, or an image no node has, it fails
    saying so."""
    path = _container_gate_inventory(vm_lab, tmp_path, IMAGE, ["rxe0"], latency=True)
    # a lane stalled by the emulation is measured again (_gates_until says why)
    in_image = ("container", "container_latency", "latency")

    def settled(result: dict) -> bool:  # all three measured, and passed
        return {g["gate"] for g in result["gates"]} >= set(in_image) and all(g["passed"] for g in result["gates"])

    code, result = _gates_until(vm_lab, path, settled)
    gates = [g for g in result["gates"] if g["gate"] in in_image]
    assert code == 0 and gates and all(g["status"] == "pass" and g["measured"] > 0 for g in gates), gates
    by_gate = {g["gate"]: g for g in gates}
    assert sorted(by_gate) == ["container", "container_latency", "latency"], gates
    bandwidth, p99 = by_gate["container"], by_gate["container_latency"]
    assert bandwidth["details"]["image"] == IMAGE and bandwidth["subject"] in ("node1 -> node3", "node3 -> node1")
    assert bandwidth["unit"] == "Gb/s" and p99["unit"] == "µs" and p99["details"]["image"] == IMAGE, p99
    assert p99["reason"].startswith(f"p99 {p99['measured']:g} µs <= 1000000 µs"), p99
    code, gates = _container_gate(vm_lab, tmp_path, "localhost/site-train:missing")
    assert code == 4 and "the image localhost/site-train:missing is not on the node" in gates[0]["reason"], gates
    conf = "/etc/containers/containers.conf.d/50-rdmaprov.conf"
    # the drop-in's memlock taken out would leave the login's (limits: unlimited): a low one is put in
    withheld = (
        ("/^devices /d", "sees no RDMA device"),
        ('s/^default_ulimits .*/default_ulimits = ["memlock=65536:65536"]/', "may not lock memory"),
    )
    withheld_gate = str(_container_gate_inventory(vm_lab, tmp_path, IMAGE, ["rxe0"]))
    for edit, lacked in withheld:
        assert vm_lab.ssh("node1", f"sed -i {shlex.quote(edit)} {conf}").returncode == 0

        def named(result: dict, lacked: str = lacked) -> bool:
            gates = [g for g in result["gates"] if g["gate"] == "container"]
            return any(lacked in g["reason"] and "(on node1)" in g["reason"] for g in gates)

        # under CI's heaviest load a server's container once took longer than the gate's 30 s to
        # start and fail: "did not start listening", the lack unnamed (_gates_until runs it again)
        code, result = _gates_until(vm_lab, withheld_gate, named)
        assert code == 4 and named(result), result["gates"]
        if lacked == "sees no RDMA device":
            _cdi_gives_rxe0_where_the_drop_in_gives_none(vm_lab)
        code, fixed = rdmaprov_json("apply", str(inventory), "--tags", "containers", "--skip-verify", timeout=600)
        assert code == 2 and {h["name"]: h["status"] for h in fixed["hosts"]}["node1"] == "changed", fixed


def _police_roce(rate: str = "200kbit", burst: str = "32k") -> str:
    """The command that polices a VM's outgoing RoCE traffic (UDP 4791) to `rate`, and nothing else."""
    return (
        "tc qdisc replace dev eth0 clsact && tc filter replace dev eth0 egress protocol ip "
        f"u32 match ip protocol 17 0xff match ip dport 4791 0xffff action police rate {rate} burst {burst} drop"
    )


_POLICE_ROCE = _police_roce()


def _rendered(page: Path, tmp_path: Path) -> Page:
    """A readiness report as headless chromium built it (its console silent), read back."""
    shown = chromium(page, tmp_path / "chromium", "--dump-dom")
    assert console(shown.stderr) == [], shown.stderr
    return Page(shown.stdout)


def test_diagnose_names_the_one_throttled_node_and_clears_the_others(vm_lab, tmp_path):
    """Three converged VMs (after the bootstrap test): healthy, every node is cleared in one round;
    with node3's RoCE traffic policed for real, node3 alone is named, in two rounds. Each run's
    readiness report, as chromium shows it, says so too."""
    assert CHROMIUM is not None, MISSING
    full = vm_lab.full_inventory
    code, healthy = rdmaprov_json("diagnose", full, "--report", str(tmp_path / "healthy.html"), timeout=900)
    assert (code, healthy["suspects"], healthy["cleared"], healthy["rounds"]) == (
        0,
        {},
        ["node1", "node2", "node3"],
        1,
    ), healthy
    # node3's RoCE traffic (UDP 4791) is policed as it leaves (the writes it sends, the acks of
    # those it receives), and nothing else: SSH to node3 keeps its speed, so the policer can always
    # be removed. A policer drops and queues nothing. An egress tbf on the whole link did not do: in
    # CI the throttle could then not be removed over SSH, and on a lab VM an rxe packet still queued
    # in an egress qdisc when its QP was destroyed crashed the 6.1 kernel (net_tx_action). Policing
    # only what node3 receives did not do either: a writer on node3 then loses only acks, and the
    # diagnosis cleared it.
    throttle = vm_lab.ssh("node3", _POLICE_ROCE)
    assert throttle.returncode == 0, throttle.stderr
    try:
        code, slow = rdmaprov_json("diagnose", full, "--report", str(tmp_path / "slow.html"), timeout=900)
    finally:
        unthrottled = vm_lab.ssh("node3", "tc qdisc del dev eth0 clsact", timeout=120)
        assert unthrottled.returncode == 0, unthrottled.stderr
    assert code == 4 and list(slow["suspects"]) == ["node3"], slow
    assert slow["cleared"] == ["node1", "node2"] and slow["rounds"] == 2
    assert all("node3" in line for line in slow["suspects"]["node3"])
    [node_gate] = [t for t in slow["tests"] if t["gate"] == "node"]
    assert (node_gate["subject"], node_gate["status"]) == ("node3", "skipped")

    assert _rendered(tmp_path / "healthy.html", tmp_path).verdict.startswith("READY")
    page = _rendered(tmp_path / "slow.html", tmp_path)
    assert page.verdict.startswith("NOT READY") and "node3" in page.verdict, page.verdict
    suspects = [row for table in page.tables for row in table.rows if [c[1] for c in row[:2]] == ["node3", "SUSPECT"]]
    assert suspects, [t.rows for t in page.tables]  # the suspects table names node3
    # the diagnosis' rails: node3's rail, tested against a cleared node, fails
    [rails] = page.matrices("node")
    assert "fail" in [cell[0] for cell in rails.row("node3")[1:]], rails.rows


def test_incast_sends_from_two_vms_into_the_third_in_turn_and_shows_what_it_cost(vm_lab, tmp_path):
    """Three converged VMs (after the bootstrap test), gates.incast written: each VM receives from
    the other two at once, one round each, the senders' figures added up against the lab's floor
    and every node's rxe counters read around each round. With node3's RoCE traffic policed, an
    incast node3 sends in fails naming it, and the retries and duplicates its lost acks cost the
    incast into it are shown (SoftRoCE is no lossless fabric: shown, not judged). The policer is
    tighter than the diagnosis tests': on CI's slower machine the incast into node3 ran at 0.068
    Gb/s and its acks fitted under 200 kbit/s, so nothing was lost."""
    data = yaml.safe_load(open(vm_lab.full_inventory))
    gates = {gate: {"enabled": False} for gate in ("node", "ib_write_bw", "rail", "latency", "all_reduce")}
    gates["incast"] = {"senders": 2, "min_gbps": 0.01, "duration_s": 3, "size": 65536}
    data["cluster"]["gates"] = gates
    inventory = tmp_path / "incast.yaml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))

    def incasts(result: dict) -> dict[str, dict]:
        return {g["subject"]: g for g in result["gates"] if g["gate"] == "incast"}

    code, healthy = _gates_until(
        vm_lab, str(inventory), lambda r: len(incasts(r)) == 3 and all(g["passed"] for g in incasts(r).values())
    )
    found = incasts(healthy)
    assert code == 0 and sorted(found) == ["node1,node2 -> node3", "node1,node3 -> node2", "node2,node3 -> node1"]
    for subject, gate in found.items():
        figures = gate["details"]["senders"]
        assert list(figures) == subject.split(" -> ")[0].split(",") and all(f > 0 for f in figures.values()), gate
        assert gate["measured"] == pytest.approx(sum(figures.values()), abs=1e-3) and gate["threshold"] == 0.01
        assert gate["details"]["receiver_device"] == "rxe0" and gate["details"]["window_s"] >= 3

    def police() -> None:
        throttle = vm_lab.ssh("node3", _police_roce("40kbit", "4k"))
        assert throttle.returncode == 0, throttle.stderr

    answered: list[bool] = []

    def unpoliced(_: dict) -> bool:
        """node3 still answers after the policed run, its policer now taken off. Its Debian 13
        kernel now and then panics in rdma_rxe while it receives an incast, policed or not
        (docs/lab.md; once in CI, 2026-11-28): the next try boots it again first, which also
        clears the policer."""
        answered.append(vm_lab.ssh("node3", "tc qdisc del dev eth0 clsact", timeout=120).returncode == 0)
        return answered[-1]

    code, slow = _gates_until(vm_lab, str(inventory), unpoliced, police)
    if not answered[-1]:
        vm_lab.restart_hung()
        pytest.fail("node3 stopped answering under the policer in each of 3 tries")
    assert code == 4, slow["gates"]
    for subject, gate in incasts(slow).items():
        if subject.endswith("-> node3"):  # its acks were dropped: the senders retried, node3 saw duplicates
            lost = [line for figures in gate["details"]["congestion"].values() for line in figures.get("lost", [])]
            assert lost, gate["details"]
        else:  # node3's writes were dropped: perftest gave up (retries exceeded) or crawled
            figure = gate["details"]["senders"]["node3"]
            assert figure is None or figure < 0.01, gate
            assert figure is not None or (not gate["passed"] and "ib_write_bw on node3" in gate["reason"]), gate
            assert figure != 0 or (not gate["passed"] and "node3 got nothing through" in gate["reason"]), gate


def test_diagnose_on_two_nodes_tests_each_alone_reads_counters_and_says_what_would_settle_it(vm_lab):
    """Two nodes, node2's RoCE traffic policed: no node passes round 1, so neither can vouch for
    the other. The diagnosis runs what decides without a third node: each node against itself
    (ib_write_bw looping back through its own HCA: both pass, the fault is between them) and the
    pair again between two reads of every counter (node2's drops show), then says what would
    settle it."""

    def throttled() -> None:  # node2 policed again before each try (a VM booted again lost it)
        throttle = vm_lab.ssh("node2", f"tc qdisc del dev eth0 clsact 2>/dev/null; {_POLICE_ROCE}")
        assert throttle.returncode == 0, throttle.stderr

    def settled(result: dict) -> bool:  # each node passed alone: a lane the emulation stalled runs again
        alone = [t for t in result["tests"] if t["subject"] in ("node1 -> node1", "node2 -> node2")]
        return len(alone) == 2 and all(t["passed"] for t in alone)

    try:
        # (seen once in CI, beside the other tests: node2 failed alone, through its own HCA, and was
        # named the suspect on it)
        code, slow = _gates_until(vm_lab, vm_lab.inventory, settled, throttled, verb=("diagnose",))
        for _ in range(3):  # the same, as a person reads it (and again on a stalled lane)
            human = rdmaprov("diagnose", vm_lab.inventory, timeout=900)
            if "to settle it: nodes that pass alone" in human.stdout:
                break
    finally:
        unthrottled = vm_lab.ssh("node2", "tc qdisc del dev eth0 clsact", timeout=120)
        assert unthrottled.returncode == 0, unthrottled.stderr
    assert code == 4 and set(slow["undecided"]) == {"node1", "node2"} and slow["suspects"] == {}, slow
    alone = {t["subject"]: t for t in slow["tests"] if t["subject"] in ("node1 -> node1", "node2 -> node2")}
    assert sorted(alone) == ["node1 -> node1", "node2 -> node2"] and all(t["passed"] for t in alone.values()), alone
    for node in ("node1", "node2"):
        assert "Alone, through its own HCA, it passed" in slow["undecided"][node], slow["undecided"]
    assert "send_err +" in slow["undecided"]["node2"], slow["undecided"]["node2"]  # the policer's drops
    assert slow["advice"].startswith("nodes that pass alone but fail together cannot tell which end")
    assert "--limit node1,node2,GOOD" in slow["advice"]
    assert human.returncode == 4 and "to settle it: nodes that pass alone" in human.stdout, human.stdout


def _frozen_while_testing(vm_lab, node: str, *args: str) -> tuple[int, dict, str]:
    """Run `rdmaprov ARGS --json` and freeze `node` once its ib_write_bw runs; the run's exit
    code, JSON and stderr (the node thawed again afterwards). A run before that lost the node left
    its ib_write_bw running on it until its `timeout` ends it: taken for this run's, it froze the
    node before this run had started (seen in CI), so this run starts once none is left."""
    gone = _wait_for(lambda: vm_lab.ssh(node, "pgrep -x ib_write_bw").returncode == 1, 300)
    assert gone, f"an ib_write_bw of an earlier run still runs on {node}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdmaprov", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, COLUMNS="200"),
    )
    try:
        assert _wait_for(lambda: vm_lab.ssh(node, "pgrep -x ib_write_bw").returncode == 0, 300, 0.5), (
            "ib_write_bw never ran on " + node
        )
        with vm_lab.frozen(node):
            out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        return proc.returncode, json.loads(out), err
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (exit {proc.returncode}):\n{out}\n{err}") from None


@pytest.mark.lab_pair
def test_a_node_that_stops_answering_mid_gate_or_mid_diagnose_is_named_lost(vm_lab, tmp_path):
    """node2's VM frozen while its ib_write_bw runs (no answer, no reset: as if it lost power),
    first in verify's gates, then in a diagnosis: each run names node2 lost, with when and in
    which step, instead of a crash; the gates after it say why they did not run; exit 4; no
    traceback on stderr. Lost after 15 s of silence, not the lab's 30: each run waits it out."""
    gates = {"ib_write_bw": {"enabled": True, "duration_s": 20}, "all_reduce": {"enabled": True}}
    inventory = _gates_only(vm_lab, tmp_path, "lost.yaml", ["rxe0"], gates, connect_timeout=15)

    code, result, err = _frozen_while_testing(vm_lab, "node2", "verify", inventory, "--gates")
    assert code == 4 and "Traceback" not in err and "failed with" not in err, err
    jsonschema.validate(result, load_schema("result"))
    by_gate = {g["gate"]: g for g in result["gates"]}
    pair, cluster = by_gate["ib_write_bw"], by_gate["all_reduce"]
    assert pair["reason"].startswith("not judged: node2 stopped answering at "), pair
    assert "during the ib_write_bw gate" in pair["reason"] and pair["details"]["lost"] == "node2"
    assert cluster["reason"].startswith("not run: node2 stopped answering at "), cluster
    assert result["diagnosis"]["lost"].get("node2", "").startswith("node2 stopped answering at "), result["diagnosis"]
    assert "node2" not in result["diagnosis"]["suspects"]

    # answering again before the diagnosis starts: lost in its middle, not unreachable at its start
    # (a thawed VM's connections time out first; seen under CI's load on the copy of the pair)
    assert _wait_for(lambda: vm_lab.ssh("node2", "true").returncode == 0, 120)
    code, diagnosis, err = _frozen_while_testing(vm_lab, "node2", "diagnose", inventory)
    assert code == 4 and "Traceback" not in err and "failed with" not in err, err
    assert "during the diagnosis" in diagnosis["lost"].get("node2", ""), diagnosis
    assert "node2" not in diagnosis["suspects"] and "node2" not in diagnosis["cleared"]
    # node2 answers again once thawed: the lab goes on
    assert _wait_for(lambda: vm_lab.ssh("node2", "true").returncode == 0, 120)


@pytest.mark.lab_pair
def test_lab_status_names_a_vm_that_stopped_answering_and_restart_boots_it_back_converged(vm_lab, tmp_path):
    """node2's QEMU stopped where it stands: `lab status` says it runs but does not answer SSH
    (exit 4), and that QEMU does not answer either; `lab restart node2`, finding no stalled NIC
    to resume, powers it off and boots it on its own disk, so it answers with the host keys the
    lab pinned and still holds what apply gave it (verify: rxe0 up)."""
    status = json.loads(rdmaprov("lab", "--dir", str(vm_lab.dir), "status", "--json", timeout=60).stdout)
    [before] = [row for row in status if row["name"] == "node2"]
    with vm_lab.frozen("node2"):
        stopped = rdmaprov("lab", "--dir", str(vm_lab.dir), "status", timeout=60)
        assert stopped.returncode == 4, stopped.stdout
        status = json.loads(rdmaprov("lab", "--dir", str(vm_lab.dir), "status", "--json", timeout=60).stdout)
        [frozen] = [row for row in status if row["name"] == "node2"]
        assert (frozen["running"], frozen["ssh"]) == (True, False), frozen
        assert frozen["nic"].startswith("QEMU not asked: "), frozen  # a stopped QEMU answers nothing
        restarted = rdmaprov("lab", "--dir", str(vm_lab.dir), "restart", "node2", timeout=900)
    assert restarted.returncode == 0, restarted.stderr
    assert "lab restart: node2 answering SSH again: booted again on its own disk" in restarted.stdout
    status = json.loads(rdmaprov("lab", "--dir", str(vm_lab.dir), "status", "--json", timeout=60).stdout)
    [after] = [row for row in status if row["name"] == "node2"]
    assert after["ssh"] and after["pid"] != before["pid"] and after["kernel"] is None, after
    assert (vm_lab.dir / "nodes" / "node2" / "console.log.1").exists()  # the boot before, kept
    code, result = rdmaprov_json("verify", vm_lab.inventory, "--limit", "node2", timeout=600)
    assert code == 0 and [v["status"] for v in result["verify"]] == ["ok"], result["verify"]


@pytest.mark.lab_pair
def test_netns_mode_needing_a_reboot_is_reported_and_rebooted_only_when_allowed(vm_lab, tmp_path):
    # Another network namespace on node2 makes the live switch impossible.
    assert vm_lab.ssh("node2", "ip netns add rdmaprov-blocker").returncode == 0
    shared = tmp_path / "shared.yaml"
    # with RoCE QoS declared too: its boot unit must put the ToS back after the reboot below
    text = open(vm_lab.inventory).read().replace("netns_mode: exclusive", "netns_mode: shared")
    shared.write_text(text.replace("defaults:\n", "defaults:\n  roce_qos: {profile: pfc_only}\n", 1))
    code, result = rdmaprov_json("apply", str(shared), "--skip-gates", "--limit", "node2", timeout=600)
    assert code == 6, result  # changes made, and verify fails: the mode is still exclusive
    [node2] = result["hosts"]
    assert node2["reboot_required"] == [
        "ib_core netns_mode is exclusive, wanted shared: 1 other network namespace(s) exist, so it cannot switch live"
    ]
    assert vm_lab.ssh("node2", "rdma system show").stdout.split()[1] == "exclusive"  # nothing rebooted

    code, result = rdmaprov_json(
        "apply", str(shared), "--skip-gates", "--limit", "node2", "--allow-reboot", timeout=900
    )
    assert code in (0, 2), result
    [node2] = result["hosts"]
    assert node2["reboot_required"] == [] and any(
        w.startswith("rebooted for: ib_core netns_mode") for w in node2["warnings"]
    )
    assert vm_lab.ssh("node2", "rdma system show").stdout.split()[1] == "shared"
    assert [v["status"] for v in result["verify"]] == ["ok"]  # rxe0 back after the reboot, mode as declared
    assert vm_lab.ssh("node2", f"cat {TOS_FILE}").stdout.strip() == "104"  # set again at boot (pfc_only: no ECT)

    # back to the lab's mode: node2 alone was changed (a live switch now, the reboot took the blocker)
    code, result = rdmaprov_json(
        "apply", vm_lab.inventory, "--skip-gates", "--allow-reboot", "--limit", "node2", timeout=900
    )
    assert code in (0, 2) and [v["status"] for v in result["verify"]] == ["ok"], result
    assert vm_lab.ssh("node2", "rmdir /sys/kernel/config/rdma_cm/rxe0").returncode == 0  # QoS off leaves the ToS


# In the stack's RDMA package set, and nothing else depends on it: removing it makes apply install it.
PACKAGE = "rdmacm-utils"
# Keeps apt inside its install (holding dpkg's frontend lock) for a while before dpkg runs.
SLOW_APT = "/etc/apt/apt.conf.d/99rdmaprov-test-slow"


def _slow_apt(seconds: int) -> str:
    return f"echo 'DPkg::Pre-Invoke {{\"sleep {seconds}\";}};' > {SLOW_APT}"


def _apply_in_background(inventory: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rdmaprov", "apply", inventory, "--limit", "node2", "--skip-gates", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, COLUMNS="200"),
    )


@pytest.mark.lab_pair
def test_a_held_dpkg_lock_a_full_disk_and_a_reboot_mid_install_are_each_named(vm_lab, tmp_path):
    # Long enough for node2 to come back from a reboot under emulation before it is called lost.
    patient = tmp_path / "patient.yaml"
    patient.write_text(open(vm_lab.inventory).read().replace("connect_timeout: 30", "connect_timeout: 150"))

    # Another apt holds dpkg's lock: apply waits, says so while it waits, then converges.
    holder = f"apt-get install -y -q {PACKAGE} > /root/holder.log 2>&1"
    prepared = vm_lab.ssh("node2", f"apt-get remove -y -q {PACKAGE} && {_slow_apt(40)} && ({holder} &) && sleep 2")
    assert prepared.returncode == 0, prepared.stderr
    apply = _apply_in_background(str(patient))
    assert apply.stderr is not None
    waited = ""
    for line in apply.stderr:
        if "waiting for the dpkg lock" in line:
            waited = line
            break
    # shown while the other apt still holds the lock, not when the command ends; stderr is a pipe
    # here, so the note comes as a plain progress line, after the time elapsed
    assert re.match(
        r"\[\d+:\d\d:\d\d\] node2: waiting for the dpkg lock \(1/60, 5 s each\): dpkg: error: dpkg frontend lock",
        waited,
    ), waited
    assert vm_lab.ssh("node2", "pgrep -f '^sleep 40$'").returncode == 0
    out, _ = apply.communicate(timeout=600)
    assert apply.returncode in (0, 2), out
    assert vm_lab.ssh("node2", f"dpkg -s {PACKAGE} | grep -q 'Status: install ok installed'").returncode == 0

    # A full root filesystem: named as such, at once (dpkg's error is not retried).
    fill = (
        f"rm -f {SLOW_APT} && apt-get remove -y -q {PACKAGE} && "
        "fallocate -l $(( $(stat -f -c '%f * %S' /) - 4194304 )) /fill && "
        "i=0; while fallocate -l 64K /fill.$i 2>/dev/null; do i=$((i+1)); done; df -h / | tail -1"
    )
    assert vm_lab.ssh("node2", fill, timeout=300).returncode == 0
    try:
        code, full = rdmaprov_json("apply", vm_lab.inventory, "--limit", "node2", "--skip-gates", timeout=600)
        # the applied-state record could not be written either, and left no empty temp file
        assert "applied.json.rdmaprov-tmp" not in vm_lab.ssh("node2", "ls /etc/rdmaprov").stdout
    finally:
        assert vm_lab.ssh("node2", "rm -f /fill /fill.*").returncode == 0
    [node2] = full["hosts"]
    assert code == 4 and node2["status"] == "failed", node2
    assert "disk full" in node2["error"] and "No space left on device" in node2["error"], node2["error"]
    assert full["duration_s"] < 120, full["duration_s"]

    # A reboot while apply installs on node2: the connection was lost and the host rebooted.
    assert vm_lab.ssh("node2", _slow_apt(60)).returncode == 0
    apply = _apply_in_background(str(patient))
    deadline = time.monotonic() + 300
    while vm_lab.ssh("node2", "pgrep -f '^sleep 60$'").returncode != 0:
        assert time.monotonic() < deadline and apply.poll() is None, "apply never reached the install"
        time.sleep(2)
    vm_lab.ssh("node2", "systemctl reboot")
    out, _ = apply.communicate(timeout=900)
    [node2] = json.loads(out)["hosts"]
    assert apply.returncode == 4 and node2["status"] == "failed", node2
    assert "connection lost" in node2["error"] and "it rebooted during the run" in node2["error"], node2["error"]
    assert "debconf" not in node2["error"]

    assert vm_lab.ssh("node2", f"rm -f {SLOW_APT}").returncode == 0
    code, again = rdmaprov_json("apply", vm_lab.inventory, "--limit", "node2", "--skip-gates", timeout=900)
    assert code in (0, 2) and [v["status"] for v in again["verify"]] == ["ok"], again


@pytest.mark.lab_pair
def test_port_error_counters_are_judged_by_their_growth_between_checks(vm_lab, tmp_path, monkeypatch):
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path))  # this test's own baselines

    def rxe0() -> dict:
        code, result = rdmaprov_json("verify", vm_lab.inventory, "--limit", "node2", timeout=300)
        [found] = [f for f in result["verify"][0]["findings"] if f["id"] == "rdma.port_errors"]
        return {"code": code, **found}

    first = rxe0()
    assert first["code"] == 0 and first["ok"] and first["found"].startswith("baseline recorded"), first
    assert first["subject"] == "rxe0/1" and first["expected"] == "link_downed +0"
    quiet = rxe0()
    assert quiet["ok"] and quiet["found"].startswith("none grew past its limit"), quiet
    # node2's link goes down for a moment: SoftRoCE counts it in link_downed
    blip = "nohup sh -c 'ip link set eth0 down; sleep 2; ip link set eth0 up' >/dev/null 2>&1 &"
    assert vm_lab.ssh("node2", blip).returncode == 0
    time.sleep(10)
    flapped = rxe0()
    assert flapped["code"] == 4 and not flapped["ok"] and flapped["found"].startswith("link_downed +1 in"), flapped
    assert "cable" in flapped["hint"]
    assert rxe0()["ok"]  # judged once: the next check starts from the new totals


def _findings(result: dict, host: str) -> dict[str, list[dict]]:
    [verified] = [v for v in result["verify"] if v["name"] == host]
    by_id: dict[str, list[dict]] = {}
    for f in verified["findings"]:
        by_id.setdefault(f["id"], []).append(f)
    return by_id


@pytest.mark.lab_pair
def test_node_health_pcie_gid_and_a_node_whose_rdma_core_differs_from_the_fleet(vm_lab, tmp_path, monkeypatch):
    # this test's own counter baselines: node2's link flapped for real in the counters test, and the
    # session's baselines from before it would rightly fail node2's rdma.port_errors here
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path / "state"))
    code, healthy = rdmaprov_json("verify", vm_lab.inventory, timeout=300)
    assert code == 0, healthy["verify"]
    node1 = _findings(healthy, "node1")
    # SoftRoCE has no PCIe link of its own: unknown, with why, and not a failure
    [pcie] = node1["rdma.pcie_link"]
    assert pcie["unknown"] and pcie["ok"] and "SoftRoCE" in pcie["found"], pcie
    [gid] = node1["rdma.gid"]
    assert gid["ok"] and gid["check"] == "GID index 1" and "RoCE v2" in gid["found"]
    assert {f["subject"] for f in node1["fleet.kernel"] + node1["fleet.rdma_core"]} == {
        "kernel on debian 12",
        "rdma-core on debian 12",
    }

    # a GID index the port has no RoCE v2 address at: the hint names where they are
    data = yaml.safe_load(open(vm_lab.inventory))
    data["defaults"]["rdma"]["gid_index"] = 7
    wrong = tmp_path / "gid7.yaml"
    wrong.write_text(yaml.safe_dump(data, sort_keys=False))
    code, result = rdmaprov_json("verify", str(wrong), "--limit", "node1", timeout=300)
    [gid7] = _findings(result, "node1")["rdma.gid"]
    assert code == 4 and not gid7["ok"] and gid7["found"] == "no GID at that index", gid7
    assert "set rdma.gid_index (or NCCL_IB_GID_INDEX in nccl.env) to 1" in gid7["hint"]

    # node2 gets an rdma-core of another version (the mirror's package, re-versioned and installed
    # with dpkg, as a node that missed an upgrade has): the fleet check names it and the usual one
    installed = vm_lab.ssh("node2", "dpkg-query -W -f '${Version}' rdma-core").stdout.strip()
    odd = "44.0-1+rdmaprovtest"
    repack = (
        "set -e; rm -rf /tmp/rc && mkdir /tmp/rc && cd /tmp/rc && apt-get download -q rdma-core && "
        "dpkg-deb -R rdma-core_*.deb x && "
        f"sed -i 's/^Version: .*/Version: {odd}/' x/DEBIAN/control && dpkg-deb -b x odd.deb >/dev/null && "
        "dpkg -i odd.deb >/dev/null 2>&1"
    )
    assert vm_lab.ssh("node2", repack, timeout=300).returncode == 0
    try:
        code, skewed = rdmaprov_json("verify", vm_lab.inventory, timeout=300)
        failed = {(v["name"], f["id"]): f for v in skewed["verify"] for f in v["findings"] if not f["ok"]}
        assert code == 4 and list(failed) == [("node2", "fleet.rdma_core")], failed
        odd_one = failed[("node2", "fleet.rdma_core")]
        assert (odd_one["found"], odd_one["expected"]) == (
            odd,
            f"{installed} (as on 1 of 2 nodes; no majority, so the newest counts)",
        )
        assert odd_one["subject"] == "rdma-core on debian 12" and "pin it" in odd_one["hint"]
    finally:
        restore = f"apt-get install -y -q --allow-downgrades rdma-core={installed} >/dev/null"
        assert vm_lab.ssh("node2", restore, timeout=300).returncode == 0
    code, again = rdmaprov_json("verify", vm_lab.inventory, timeout=300)
    assert code == 0, again["verify"]


@pytest.mark.lab_pair
def test_an_ansible_inventory_of_the_lab_imported_then_checked(vm_lab, tmp_path):
    """What a DeepOps user does on day one: import their Ansible inventory, then check the nodes."""
    lab = yaml.safe_load(open(vm_lab.inventory))
    ssh = lab["cluster"]["ssh"]
    hosts = {name: spec["address"] for group in lab["groups"].values() for name, spec in group["hosts"].items()}
    ansible = {
        "all": {
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": ssh["key"]},
            "children": {"gpu": {"hosts": {name: {"ansible_host": address} for name, address in hosts.items()}}},
        }
    }
    source = tmp_path / "hosts.yml"
    source.write_text(yaml.safe_dump(ansible))
    imported = tmp_path / "lab-imported.yaml"
    proc = rdmaprov(
        "import", "ansible", str(source), "-o", str(imported), "--known-hosts", ssh["known_hosts"], "--name", "lab"
    )
    assert proc.returncode == 0, proc.stderr
    assert rdmaprov("validate", str(imported)).returncode == 0
    # memlock is what the lab's apply set: the imported inventory's defaults ask the same, no drift
    code, result = rdmaprov_json("check", str(imported), "--tags", "limits", "--skip-verify", "--limit", "gpu")
    assert code == 0 and {h["name"]: h["status"] for h in result["hosts"]} == dict.fromkeys(hosts, "unchanged")


def _slurm_inventory(vm_lab, tmp_path, controller: str = "node1", hosts: tuple[str, ...] = (), **check) -> str:
    """The lab cluster with Slurm run by rdmaprov: node1 the controller, both nodes in one
    partition, the node check every 30 s, half the partition drainable at once. `hosts`: only
    these of the lab's nodes (node3 joins the lab in the bootstrap test), `controller` one of them.
    (Every 20 s until 2026-11-28: a check takes a lab VM's emulated CPU for seconds, so each node
    spent most of its time checking itself, and each step of the Slurm tests took longer.)"""
    data = yaml.safe_load(open(vm_lab.full_inventory if hosts else vm_lab.inventory))
    for group in data["groups"].values():
        if hosts:
            group["hosts"] = {n: spec for n, spec in group["hosts"].items() if n in hosts}
    data["cluster"]["slurm"] = {
        "enabled": True,
        "controller": controller,
        "health_check": {"interval_s": 30, "max_drain_fraction": 0.5, **check},
    }
    # as jobs: ib_write_bw's lanes and the all_reduce; the rail and latency gates launch their
    # lanes as ib_write_bw does (run_lanes), and ran over Slurm for minutes more on CI's machine
    gates = data["cluster"]["gates"]
    for gate in ("rail", "latency"):
        gates[gate] = {**gates.get(gate, {}), "enabled": False}
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _sinfo(vm_lab, controller: str = "node1") -> dict[str, tuple[str, str]]:
    """{node: (state, reason)} from sinfo on the controller."""
    return sinfo_states(vm_lab.ssh(controller, SINFO).stdout)


def _a_restart_with_a_dead_hca_drains_before_any_job(vm_lab, inventory: str, controller: str, node: str) -> None:
    """slurmd restarts while `node`'s device is gone (a reboot with a dead HCA): the check it runs
    before registering drains the node (UNKNOWN or NOT_RESPONDING then), so a job sent to `node`
    at once waits until the repair (apply) resumes it, and only then runs."""
    assert vm_lab.ssh(node, "rdma link del rxe0 && systemctl restart slurmd").returncode == 0

    def show() -> str:
        return vm_lab.ssh(controller, f"scontrol -o show node {node}").stdout

    # not responding since the stop, or drained already
    assert _wait_for(lambda: re.search(r"State=\S*(NOT_RESPONDING|DRAIN)", show()), 30), show()
    job = vm_lab.ssh(controller, f"sbatch --parsable -w {node} -o /dev/null --wrap true").stdout.strip()
    assert job.isdigit(), job
    assert _wait_for(lambda: _sinfo(vm_lab, controller)[node][0] == "drained", 60), _sinfo(vm_lab, controller)
    assert _sinfo(vm_lab, controller)[node][1].startswith("rdmaprov: rdma."), _sinfo(vm_lab, controller)

    def job_state() -> str:
        return re.search(r"JobState=(\S+)", vm_lab.ssh(controller, f"scontrol show job {job}").stdout).group(1)

    assert job_state() == "PENDING"
    # the repair: the link's deploy alone (the drain step earlier in the test repairs with a whole apply)
    code, _ = rdmaprov_json("apply", inventory, "--tags", "softroce", "--skip-verify", "--skip-gates", timeout=900)
    assert code == 2
    assert _wait_for(lambda: job_state() == "COMPLETED", 90), (job_state(), _sinfo(vm_lab, controller))
    assert _sinfo(vm_lab, controller)[node] == ("idle", "none")


def _an_admins_drain_stays(vm_lab, controller: str, node: str) -> None:
    """An admin drains `node` for another reason: its check passes (run here as slurmd runs it),
    and it stays drained with the admin's reason."""
    admin = vm_lab.ssh(controller, f"scontrol update nodename={node} state=drain reason='DIMM swap, ticket 4711'")
    assert admin.returncode == 0, admin.stderr
    check = vm_lab.ssh(node, "rdmaprov-slurm-health-check")
    assert check.returncode == 0 and "drained" not in check.stdout, check.stdout
    assert _sinfo(vm_lab, controller)[node] == ("drained", "DIMM swap, ticket 4711"), _sinfo(vm_lab, controller)
    assert vm_lab.ssh(controller, f"scontrol update nodename={node} state=resume").returncode == 0


def _a_build_reaches_the_nodes_by_sbcast(vm_lab, tmp_path, inventory: str) -> None:
    """A build declared on the running Slurm cluster (a version upgrade): node1 builds it and
    Slurm's sbcast takes it to node2, which checks its sha256 and installs it. (A second apply
    changing nothing is the build test's, whatever carried the copy; a node busy in a job is left
    to the SSH tree, the unit tier's: both ran here until 2026-11-28, when they went for CI's
    time.)"""
    built = _with_build(vm_lab, tmp_path, "2.0", base=inventory)
    code, shipped = rdmaprov_json("apply", built, "--tags", "builds", "--skip-verify", "--skip-gates", timeout=900)
    ops = {h["name"]: {o["name"]: o for o in h["ops"]} for h in shipped["hosts"]}
    assert code == 2, [(h["name"], h["error"], h["warnings"]) for h in shipped["hosts"]]
    [send] = ops["node1"]["builds | build site-probe sent by Slurm"]["commands"]
    assert send.startswith("send site-probe-2.0-"), send
    assert send.endswith(" to node2 by Slurm's sbcast (each checks its sha256)"), send
    [receive] = [c for c in ops["node2"]["builds | build site-probe installed"]["commands"] if c.startswith("receive ")]
    assert "from Slurm's sbcast from node1, else node1, else the control machine" in receive, receive
    # a node Slurm did not take, or a copy that did not arrive whole, would be a warning: none
    assert [h["warnings"] for h in shipped["hosts"]] == [[], []], shipped["hosts"]
    assert vm_lab.ssh("node2", "readlink /opt/site-probe/current").stdout.startswith("2.0-")


@pytest.mark.lab_pair
def test_slurm_from_the_lab_mirror_drains_resumes_and_runs_the_gates_as_jobs(vm_lab, tmp_path, monkeypatch):
    # this test's own counter reads and baselines: node2's link flapped for real in the counters
    # test, and the session's reads from before it would rightly fail node2's rdma.port_errors here
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path / "state"))
    inventory = _slurm_inventory(vm_lab, tmp_path)
    code, first = rdmaprov_json("apply", inventory, timeout=1800)
    problems = [(h["name"], h["error"], h["warnings"]) for h in first["hosts"]]
    assert code == 2, (problems, [g for g in first["gates"] if not g["passed"]])
    # Slurm 22.05 and munge from the lab mirror (the VMs have no other source), the same munge key
    for node in ("node1", "node2"):
        versions = vm_lab.ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' munge slurm-client").stdout
        assert "munge 0.5.15" in versions and "slurm-client 22.05.8" in versions, versions
    keys = {
        n: vm_lab.ssh(n, "stat -c '%a %U:%G' /etc/munge/munge.key; sha256sum /etc/munge/munge.key").stdout
        for n in ("node1", "node2")
    }
    assert keys["node1"].split()[:2] == keys["node2"].split()[:2] == ["400", "munge:munge"]
    assert keys["node1"].split()[2] == keys["node2"].split()[2], keys
    secret = vm_lab.ssh("node1", "base64 -w0 /etc/munge/munge.key").stdout.strip()
    assert len(secret) > 100 and secret not in json.dumps(first)  # the key is in no result, output or diff
    # both nodes idle in sinfo, and the gates ran as Slurm jobs (srun with PMIx) and passed
    assert _wait_for(lambda: _sinfo(vm_lab) == {"node1": ("idle", "none"), "node2": ("idle", "none")}, 120), _sinfo(
        vm_lab
    )
    gates = {g["gate"]: g for g in first["gates"] if g["gate"] != "node"}
    assert gates["all_reduce"]["passed"] and gates["all_reduce"]["details"]["via"] == "slurm", gates
    assert "srun --mpi=pmix" in gates["all_reduce"]["details"]["command"]
    assert gates["ib_write_bw"]["passed"] and gates["ib_write_bw"]["details"]["via"] == "slurm", gates
    # a job keeps the node's locked-memory limit whatever the submitting shell's was
    low = vm_lab.ssh("node1", "ulimit -l 64 && srun -N1 -w node2 sh -c 'ulimit -l'")
    assert low.returncode == 0 and low.stdout.split() == ["unlimited"], (low.stdout, low.stderr)

    try:
        # node2 loses its RDMA device: within one HealthCheckInterval Slurm drains it, with rdmaprov's reason
        assert vm_lab.ssh("node2", "rdma link del rxe0").returncode == 0
        started = time.monotonic()
        assert _wait_for(lambda: _sinfo(vm_lab)["node2"][0] in ("drained", "draining"), 60), _sinfo(vm_lab)
        drained_after = time.monotonic() - started
        # the first failure names the reason; how many follow it ("(+N more)") depends on the checks.
        # A check that reads the device list just before the deletion and its GIDs just after sees
        # rxe0 without GIDs (CI saw `rdma.gid rxe0/1: no GID at that index` once): rxe0 either way.
        reason = _sinfo(vm_lab)["node2"][1]
        assert re.match(r"rdmaprov: rdma\.(device_present rxe0: missing|gid rxe0/1: )", reason), _sinfo(vm_lab)
        # the check starts within one interval (30 s) and runs within node-check's budget (10 s);
        # polled every 2 s
        assert drained_after <= 42, drained_after
        # the fleet as the checks left it in Slurm, read on the controller alone
        code, fleet = rdmaprov_json("status", inventory, timeout=120)
        assert (code, fleet["source"], fleet["counts"]["healthy"]) == (4, "node1", 1), fleet
        assert [(n["host"], n["status"], n["reason"]) for n in fleet["nodes"] if n["failing"]] == [
            ("node2", "drained by rdmaprov", reason)
        ], fleet
        # `rdmaprov apply` repairs it, changing nothing else (Slurm, munge and the health check
        # included: the stack as the first apply left it); the next check passes and resumes it
        code, repaired = rdmaprov_json("apply", inventory, "--skip-gates", timeout=900)
        changed = {(h["name"], o["deploy"]) for h in repaired["hosts"] for o in h["ops"] if o["status"] == "changed"}
        assert code == 2 and changed == {("node2", "softroce")}, changed
        assert _wait_for(lambda: _sinfo(vm_lab)["node2"] == ("idle", "none"), 90), _sinfo(vm_lab)
        assert rdmaprov_json("status", inventory, timeout=120)[0] == 0
        _a_build_reaches_the_nodes_by_sbcast(vm_lab, tmp_path, inventory)

        _a_restart_with_a_dead_hca_drains_before_any_job(vm_lab, inventory, "node1", "node2")
        _an_admins_drain_stays(vm_lab, "node1", "node2")
        # (both nodes failing with half the partition drainable, so that only one is drained: the
        # twins' Slurm test, test_gpu_twin.py, on sixteen nodes whose checks run one after another;
        # two checks racing under slurmd's timers are the unit tier's, test_slurm_drain.py. Both
        # nodes failed at once here too until 2026-11-28, when it went for CI's time.)
    finally:
        # leave the lab as the other tests expect it: RDMA links up, no health checks running
        rdmaprov_json("apply", vm_lab.inventory, "--tags", "softroce", "--skip-verify", timeout=900)
        for node in ("node1", "node2"):
            vm_lab.ssh(node, "systemctl stop slurmd slurmctld 2>/dev/null; true")


@pytest.mark.lab_only
def test_slurm_24_11_on_debian_13_drains_a_node_that_starts_with_a_dead_hca(vm_lab, tmp_path, monkeypatch):
    """Debian 13's Slurm 24.11 on node3 (the bootstrap test's Debian 13 node), its own one-node
    cluster (a 24.11 slurmd cannot join the 22.05 controller of node1): rendered for 24.11 (no
    HealthCheckTimeout, which it refuses), taken by its daemons without a word against it, the
    node idle, and an admin's drain left as it is. (A slurmd restarted with the HCA gone drains
    the node before any job, as the 22.05 test shows; run here too until 2026-11-28, when it
    went for CI's time.) `tools/test.sh lab` runs it; CI's whole run leaves it out since
    2026-11-28: installing Slurm on the emulated Debian 13 node took minutes of CI's 90, and what
    is particular to 24.11 in the rendering (no HealthCheckTimeout) is the unit tier's too."""
    monkeypatch.setenv("RDMAPROV_STATE", str(tmp_path / "state"))
    inventory = _slurm_inventory(vm_lab, tmp_path, controller="node3", hosts=("node3",))
    vm_lab.ssh("node3", "truncate -s 0 /var/log/slurm/* 2>/dev/null; true")  # this run's words only (a kept lab)
    try:
        code, result = rdmaprov_json("apply", inventory, "--skip-gates", timeout=1800)
        assert code == 2, [(h["name"], h["error"]) for h in result["hosts"]] + [
            v for v in result["verify"] if v["status"] != "ok"
        ]
        versions = vm_lab.ssh("node3", "dpkg-query -W -f '${Package} ${Version}\\n' slurmctld slurmd").stdout
        assert re.findall(r"slurm\S+ 24\.11\.", versions) == ["slurmctld 24.11.", "slurmd 24.11."], versions
        conf = vm_lab.ssh("node3", "cat /etc/slurm/slurm.conf").stdout
        assert "HealthCheckInterval=30" in conf and "HealthCheckTimeout" not in conf, conf
        assert _wait_for(lambda: _sinfo(vm_lab, "node3") == {"node3": ("idle", "none")}, 120), _sinfo(vm_lab, "node3")
        # the daemons took the file without a word against it (24.11 refuses an unknown key)
        refused = "grep -h -E 'unrecognized|Parsing error|error: .*HealthCheck' /var/log/slurm/*"
        logs = vm_lab.ssh("node3", refused).stdout
        assert logs == "", logs

        _an_admins_drain_stays(vm_lab, "node3", "node3")
    finally:
        # leave node3 as the MPI test after this one expects it: its RDMA link up, no health checks
        vm_lab.ssh("node3", "systemctl stop slurmd slurmctld 2>/dev/null; true")
        rdmaprov("apply", vm_lab.full_inventory, "--limit", "node3", "--tags", "softroce", "--skip-verify", timeout=900)


def test_one_shipped_open_mpi_lets_all_reduce_span_debian_12_and_13(vm_lab, tmp_path):
    """The mixed cluster the bootstrap test made (node1 and node2 Debian 12, node3 Debian 13)
    cannot run one job on its distros' Open MPI 4.1 and 5.0. One Open MPI, built once on the
    control machine (`rdmaprov lab mpi`, cached) for a prefix no node has, is declared as
    mpi.archive: it is repacked on one node, shipped to the others, unpacked under
    /opt/site-mpi/current and relocated there by OPAL_PREFIX; the gate's probe is rebuilt against
    it for each release, and the all_reduce gate passes across the three nodes."""
    from rdmaprov.lab.mpi import BUILT_FOR

    made = rdmaprov("lab", "mpi", timeout=1500)
    assert made.returncode == 0, made.stderr
    archive = re.search(r"^archive: (\S+)$", made.stdout, re.M).group(1)
    data = yaml.safe_load(open(vm_lab.full_inventory))
    data["defaults"]["mpi"] = {
        "source": "archive",
        "prefix": "/opt/site-mpi",
        "archive": {"path": archive, "version": "4.1.4"},
    }
    gates = data["cluster"]["gates"]
    for gate in ("ib_write_bw", "rail", "latency"):  # the bootstrap test ran these across the releases
        gates[gate] = {**gates[gate], "enabled": False}
    inventory = tmp_path / "site-mpi.yaml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    assert rdmaprov("validate", str(inventory)).returncode == 0

    code, result = rdmaprov_json("apply", str(inventory), timeout=1800)
    hosts = {h["name"]: h for h in result["hosts"]}
    gate = {(g["gate"], g["subject"]): g for g in result["gates"]}[("all_reduce", "node1,node2,node3")]
    assert code == 2 and gate["passed"], ([(h["name"], h["status"], h["error"]) for h in result["hosts"]], gate)
    assert gate["details"]["mpi"] == dict.fromkeys(["node1", "node2", "node3"], "Open MPI 4.1.4"), gate
    assert gate["details"]["command"].startswith("OPAL_PREFIX=/opt/site-mpi/current "), gate
    assert gate["details"]["command"].split()[2] == "/opt/site-mpi/current/bin/mpirun", gate

    def status(host: str, op: str) -> str:
        return next(o["status"] for o in hosts[host]["ops"] if o["name"].split(" | ")[-1] == op)

    # one repack for all three (no platform in its identity), on the first node; installed everywhere
    assert [h for h in hosts if status(h, "site MPI built") == "changed"] == ["node1"]
    assert {status(h, "site MPI installed") for h in hosts} == {"changed"}
    for node in ("node1", "node2", "node3"):
        login = vm_lab.ssh(node, "bash -lc 'mpirun --version; echo $OPAL_PREFIX'")
        assert login.stdout.startswith("mpirun (Open MPI) 4.1.4") and "/opt/site-mpi/current" in login.stdout
        assert vm_lab.ssh(node, f"test ! -e {BUILT_FOR}").returncode == 0  # relocated, not at its build prefix
    # node3 keeps Debian 13's own Open MPI 5 for whoever uses it
    assert "Open MPI) 5.0." in vm_lab.ssh("node3", "/usr/bin/mpirun --version").stdout

    code, again = rdmaprov_json("apply", str(inventory), "--skip-gates", timeout=900)
    assert code == 0 and sum(h["changed"] for h in again["hosts"]) == 0, [
        (h["name"], [op["name"] for op in h["ops"] if op["status"] == "changed"]) for h in again["hosts"]
    ]
