"""Run results: a host's status from its operations, the counters, the exit code and the JSON form
(a public interface: schemas/result.schema.json)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from rdmaprov.engine.results import HostResult, OpResult, RunResult
from rdmaprov.health.findings import Finding
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.health.verify import HostVerification
from rdmaprov.schemas import load_schema


def _host(*statuses, name="node1", reboot=None, status="unchanged") -> HostResult:
    host = HostResult(
        name,
        "10.0.0.1",
        status=status,
        ops=[OpResult(f"op {i}", s) for i, s in enumerate(statuses)],
        reboot_required=list(reboot or []),
    )
    host.settle()
    return host


def _run(*hosts: HostResult, command: str = "apply", verify=None, gates=None) -> RunResult:
    return RunResult(command, "inv.yaml", "c", "2026-01-01T00:00:00+00:00", 1.23456, list(hosts), verify, gates)


def _valid(doc: dict) -> dict:
    jsonschema.validate(doc, load_schema("result"))
    return doc


# HostResult: counters and settle


def test_changed_counts_changed_and_would_change_operations():
    statuses = ["changed", "would_change", "unchanged", "skipped", "failed"]
    host = HostResult("n", "a", ops=[OpResult(f"op {s}", s) for s in statuses])
    assert host.changed == 2 and host.failed == 1


def test_a_reboot_still_owed_counts_as_one_change_whatever_the_reasons():
    assert HostResult("n", "a", reboot_required=["netns_mode", "gpu driver"]).changed == 1
    assert HostResult("n", "a", ops=[OpResult("a", "changed")], reboot_required=["x"]).changed == 2


@pytest.mark.parametrize(
    ("ops", "status"),
    [
        ((), "unchanged"),
        (("unchanged", "skipped"), "unchanged"),
        (("unchanged", "changed"), "changed"),
        (("would_change",), "changed"),
        (("changed", "failed", "skipped"), "failed"),
        (("failed",), "failed"),
    ],
)
def test_settle_derives_the_host_status_from_its_operations(ops, status):
    assert _host(*ops).status == status


def test_settle_calls_a_host_owing_only_a_reboot_changed():
    assert _host("unchanged", reboot=["ib_core netns_mode exclusive"]).status == "changed"


@pytest.mark.parametrize("engine_status", ["failed", "unreachable", "skipped"])
def test_settle_keeps_a_status_the_engine_set(engine_status):
    assert _host("changed", status=engine_status).status == engine_status


def test_settle_twice_changes_nothing():
    host = _host("changed")
    host.settle()
    assert host.status == "changed"


# RunResult.exit_code: 0 nothing to do, 2 changes, 4 failures, 6 both


@pytest.mark.parametrize(
    ("hosts", "code"),
    [
        ([], 0),
        ([("unchanged",), ("unchanged",)], 0),
        ([("unchanged",), ("changed",)], 2),
        ([("would_change",)], 2),
        ([("unchanged",), ("failed",)], 4),
        ([("changed",), ("failed",)], 6),
        ([("changed", "failed")], 6),
    ],
)
def test_exit_code_from_host_operations(hosts, code):
    assert _run(*(_host(*ops, name=f"n{i}") for i, ops in enumerate(hosts))).exit_code == code


@pytest.mark.parametrize("status", ["unreachable", "skipped", "failed"])
def test_exit_code_counts_a_host_the_engine_failed_as_a_failure(status):
    assert _run(_host(status=status)).exit_code == 4
    assert _run(_host(status=status), _host("changed", name="n2")).exit_code == 6


def test_exit_code_counts_a_reboot_still_owed_as_a_change():
    assert _run(_host(reboot=["netns_mode"])).exit_code == 2


def test_exit_code_counts_a_failed_or_unreachable_verification_as_a_failure():
    ok, bad = HostVerification("n1", "a"), HostVerification("n2", "b", status="failed")
    assert _run(_host(), verify=[ok]).exit_code == 0
    assert _run(_host(), verify=[ok, bad]).exit_code == 4
    assert _run(_host("changed"), verify=[HostVerification("n1", "a", status="unreachable")]).exit_code == 6


def test_exit_code_counts_a_failed_gate_but_not_a_warned_or_skipped_one():
    passed = [
        GateResult("ib_write_bw", Subject.parse("n1 -> n2"), True, "ok"),
        GateResult("all_reduce", Subject.parse("n1,n2"), True, "slow", status="warn"),
        GateResult("node", Subject.parse("n1"), True, "skipped (one GPU)", status="skipped"),
    ]
    assert _run(_host(), gates=passed).exit_code == 0
    assert (
        _run(_host(), gates=passed + [GateResult("all_reduce", Subject.parse("n1,n2"), False, "below 80%")]).exit_code
        == 4
    )


def test_an_empty_verify_or_gate_list_is_no_failure():
    assert not _run(_host(), verify=[], gates=[]).health_failed


# summary and to_json


def test_summary_counts_hosts_by_status_with_every_required_key():
    result = _run(
        _host("changed", name="a"), _host(name="b"), _host("failed", name="c"), _host(status="skipped", name="d")
    )
    assert result.summary() == {"hosts": 4, "changed": 1, "unchanged": 1, "failed": 1, "unreachable": 0, "skipped": 1}
    assert _run().summary() == {"hosts": 0, "changed": 0, "unchanged": 0, "failed": 0, "unreachable": 0}


def test_to_json_matches_the_schema_and_carries_counters_per_host():
    host = _host("changed", "unchanged", "failed", reboot=["netns_mode"])
    host.ops[0].commands, host.ops[0].diff, host.ops[0].deploy = ["echo a"], "+a", "mtu"
    doc = _valid(_run(host, _host(name="n2", status="unreachable")).to_json())
    assert doc["hosts"][0]["changed"] == 2 and doc["hosts"][0]["failed"] == 1
    assert doc["hosts"][0]["ops"][0] == {
        "name": "op 0",
        "status": "changed",
        "commands": ["echo a"],
        "stdout": [],
        "stderr": [],
        "diff": "+a",
        "deploy": "mtu",
        "drift": None,
    }
    assert doc["exit_code"] == 6 and doc["summary"]["unreachable"] == 1
    assert doc["duration_s"] == 1.235 and doc["schema_version"] == 1


def test_to_json_leaves_out_verify_and_gates_that_did_not_run():
    doc = _valid(_run(_host()).to_json())
    assert "verify" not in doc and "gates" not in doc


def test_to_json_with_verify_and_gates_matches_the_schema():
    finding = Finding(
        "n1",
        "mlx5_0/1",
        "port state",
        False,
        "ACTIVE",
        "DOWN",
        "check the cable",
        "corrective",
        "rdma.port_state",
        "softroce",
    )
    verify = [HostVerification("n1", "10.0.0.1", "failed", None, [finding])]
    gates = [
        GateResult(
            "ib_write_bw", Subject.parse("n1 -> n2"), True, "ok", 23.5, 20.0, "Gb/s", 1, {"size": 65536}, "pass", 25.0
        ),
        GateResult("all_reduce", Subject.parse("n1,n2"), False, "below", 1.0, 2.0, "GB/s", 2),
    ]
    doc = _valid(_run(_host(), verify=verify, gates=gates).to_json())
    assert doc["verify"][0]["findings"][0]["id"] == "rdma.port_state"
    assert [g["status"] for g in doc["gates"]] == ["pass", "fail"] and doc["exit_code"] == 4


def test_to_json_of_a_check_with_drift_and_skipped_batches_matches_the_schema():
    drifted = HostResult(
        "n1",
        "a",
        ops=[OpResult("mtu | set", "would_change", drift="corrective", deploy="mtu")],
        inputs_changed=["nccl_env"],
        last_applied="2026-01-01T00:00:00+00:00",
        round_trips=3,
    )
    skipped = HostResult("n2", "b", status="skipped", error="not run: 1 of 1 hosts in batch 1 failed", batch=2)
    drifted.settle()
    doc = _valid(_run(drifted, skipped, command="check").to_json())
    assert [h["status"] for h in doc["hosts"]] == ["changed", "skipped"] and doc["hosts"][1]["batch"] == 2


def test_to_json_is_plain_json():
    gates = [GateResult("all_reduce", Subject.parse("x"), True, "ok", details={"sizes": [1, 2]})]
    doc = _run(_host("changed"), verify=[HostVerification("n1", "a")], gates=gates).to_json()
    assert json.loads(json.dumps(doc)) == doc


def test_to_json_with_a_node_gate_matches_the_schema():
    gates = [
        GateResult("node", Subject.parse("n1"), True, "skipped (one GPU: nothing to reduce across)", status="skipped")
    ]
    _valid(_run(_host(), gates=gates).to_json())


def test_the_summary_line_counts_interrupted_and_not_run_hosts():
    """After Ctrl-C every host is `interrupted`: the line under the table says so, not '0 failed'."""
    import io

    from rich.console import Console

    from rdmaprov.report.tables import print_run

    def line(*hosts: HostResult, interrupted: bool = False) -> str:
        result = _run(*hosts)
        result.interrupted = interrupted
        buffer = io.StringIO()
        print_run(result, Console(file=buffer, width=200, force_terminal=False))
        return buffer.getvalue().splitlines()[-1]

    stopped = [HostResult(n, "a", status="interrupted", error="interrupted while planning") for n in ("n1", "n2")]
    assert line(*stopped, interrupted=True) == (
        "2 hosts: 0 changed, 0 unchanged, 0 failed, 0 unreachable, 2 interrupted — exit 130"
    )
    skipped = HostResult("n2", "b", status="skipped", error="not run: 1 of 1 hosts in batch 1 failed", batch=2)
    assert (
        line(_host("failed"), skipped) == "2 hosts: 0 changed, 0 unchanged, 1 failed, 0 unreachable, 1 not run — exit 4"
    )


def test_a_lost_hosts_failed_block_says_so_before_its_last_output():
    """The output of an operation whose connection was lost is what the node printed before it
    went (debconf's notes): the block names the loss first, so the output is not read as the cause."""
    import io

    from rich.console import Console

    from rdmaprov.report.tables import print_run

    op = OpResult(
        "rdma_userspace | RDMA userspace packages",
        "failed",
        stdout=["debconf: delaying package configuration, since apt-utils is not installed"],
    )
    error = (
        "rdma_userspace | RDMA userspace packages failed: connection lost: SSH session not active; "
        "it has not answered since (tried for 30 s)"
    )
    lost = HostResult("node2", "10.0.0.2", status="unreachable", error=error, ops=[op])
    buffer = io.StringIO()
    print_run(_run(lost), Console(file=buffer, width=300, force_terminal=False))
    assert buffer.getvalue().splitlines()[:4] == [
        "node2: rdma_userspace | RDMA userspace packages: FAILED",
        f"    {error}",
        "    its output before the connection was lost:",
        "    debconf: delaying package configuration, since apt-utils is not installed",
    ]
