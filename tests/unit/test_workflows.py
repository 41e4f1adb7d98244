"""Day-2 pieces that need no hosts: batching, drift classification, the applied record, metrics."""

from __future__ import annotations

import json

import pytest

from rdmaprov.workflows.rolling import batch_size, batches, parse_max_fail
from rdmaprov.engine.applied import AppliedRecord, classify, classify_fact, merged_record, parse_record
from rdmaprov.engine.desired import fingerprint
from rdmaprov.engine.results import HostResult, OpResult, RunResult
from rdmaprov.errors import UserError
from rdmaprov.facts.files import FileState, ManagedFile
from rdmaprov.facts.ssh import SshIdentityFact
from rdmaprov.health.gates.ib_write_bw import newcomer_pairs
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.ssh import login_key
from rdmaprov.parsers.ssh import SshIdentity
from rdmaprov.report.textfile import render_metrics, write_textfile
from rdmaprov.health.checks import Finding, check_deploy
from rdmaprov.health.verify import HostVerification
from tests.support.ops import run_notes


@pytest.mark.parametrize(("serial", "total", "size"), [(None, 7, 7), ("1", 3, 1), ("4", 10, 4), ("25%", 10, 3), ("100%", 10, 10), ("1%", 10, 1)])
def test_batch_size(serial, total, size):
    assert batch_size(serial, total) == size


@pytest.mark.parametrize("bad", ["0", "0%", "101%", "x", "-1", "2.5"])
def test_batch_size_refuses_nonsense(bad):
    with pytest.raises(UserError, match="--serial"):
        batch_size(bad, 10)


def test_batches_keep_order():
    assert batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_max_fail():
    assert parse_max_fail(None) is None
    assert parse_max_fail("20%") == 0.2
    assert parse_max_fail("0") == 0.0
    with pytest.raises(UserError, match="--max-fail"):
        parse_max_fail("150%")


def test_fingerprint_is_stable_and_sensitive():
    a = fingerprint((), {"path": "/etc/nccl.conf", "content": "NCCL_DEBUG=WARN\n"})
    assert a == fingerprint((), {"content": "NCCL_DEBUG=WARN\n", "path": "/etc/nccl.conf"})
    assert a != fingerprint((), {"path": "/etc/nccl.conf", "content": "NCCL_DEBUG=INFO\n"})


def test_operations_record_their_fingerprint():
    kwargs = {"path": "/etc/nccl.conf", "content": "NCCL_DEBUG=WARN\n"}
    _, notes = run_notes(managed_file, {ManagedFile: FileState(False)}, **kwargs)
    assert notes.desired[("node1", "op")] == fingerprint((), kwargs)


def test_classify_against_the_record():
    assert classify(None, "abc") == "new"
    assert classify("abc", "abc") == "corrective"
    assert classify("abc", "def") == "intentional"


def test_fact_drift_classified_by_the_deploy_behind_the_check():
    assert check_deploy("rdma.port_state", "softroce") == "softroce"
    assert check_deploy("mtu.netdev", "roce") == "mtu"
    assert classify_fact(check_deploy("rdma.port_state", "softroce"), True, []) == "corrective"
    assert classify_fact(check_deploy("rdma.port_state", "softroce"), False, []) == "new"
    assert classify_fact(check_deploy("mtu.netdev", "roce"), True, ["mtu"]) == "intentional"
    assert classify_fact(check_deploy("mtu.netdev", "roce"), True, ["nccl_env"]) == "corrective"
    # An IB port going down is the hardware's doing, whatever the inventory says.
    assert check_deploy("rdma.port_state", "infiniband") is None
    assert classify_fact(check_deploy("rdma.port_state", "infiniband"), True, ["softroce"]) == "corrective"


def test_every_check_verify_makes_has_an_id_and_the_deploy_behind_it():
    from rdmaprov.deploys import STACK
    from rdmaprov.health.checks import CHECKS

    assert {c.deploy for c in CHECKS.values()} - {None} <= set(STACK)
    assert all(c.id.count(".") == 1 for c in CHECKS.values())


def test_record_round_trip_and_merge():
    previous = AppliedRecord(ops={"limits | memlock": "1", "nccl_env | nccl.conf": "2"})
    text = merged_record(previous, {"nccl_env | nccl.conf": "3"}, "sha", "0.1.0")
    record = parse_record(text)
    assert record.ops == {"limits | memlock": "1", "nccl_env | nccl.conf": "3"}
    assert record.inventory_sha256 == "sha" and record.rdmaprov_version == "0.1.0" and record.applied_at
    assert parse_record("") == AppliedRecord()
    assert parse_record("{not json") == AppliedRecord()
    assert parse_record(json.dumps({"ops": ["wrong"]})) == AppliedRecord()


def test_newcomers_pair_with_existing_nodes():
    assert newcomer_pairs(["n1", "n2", "n3", "n4"], ["n3", "n4"]) == [("n1", "n3"), ("n2", "n4")]
    assert newcomer_pairs(["n1", "n2", "n3"], ["n2", "n3"]) == [("n1", "n2"), ("n1", "n3")]
    assert newcomer_pairs(["a", "b"], ["a", "b"]) == [("a", "b")]


def test_login_key_authorizes_operator_once():
    identity = SshIdentity(hostname="new1", home="/home/ops")
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDyHPzf6oq2bnYVzU0mC9Jm4wAwdIGSQ7zqQXkZ4bfzz operator@laptop"
    facts = {SshIdentityFact: identity, ManagedFile: FileState(True, b"ssh-rsa AAAAB3 someone\n", "600", "ops", "ops")}
    cmds, notes = run_notes(login_key, facts, user="ops", public_key=key + "\n", marker="rdmaprov operator lab")
    assert cmds[0].startswith("install -d -m 700 -o ops")
    upload = next(c for c in cmds if c.startswith("upload /home/ops/.ssh/authorized_keys.rdmaprov-tmp"))
    assert "ssh-rsa AAAAB3 someone" in upload and key in upload
    converged = FileState(True, upload.split(":\n", 1)[1].encode(), "600", "ops", "ops")
    assert run_notes(login_key, {SshIdentityFact: identity, ManagedFile: converged}, user="ops", public_key=key, marker="rdmaprov operator lab")[0] == []


def _check_result() -> RunResult:
    result = RunResult("check", "lab.yaml", "lab", "2026-11-21T00:00:00+00:00", duration_s=3.25)
    node1 = HostResult("node1", "10.0.0.1", status="changed", ops=[
        OpResult("nccl.conf", "would_change", drift="corrective"),
        OpResult("memlock", "would_change", drift="intentional"),
        OpResult("packages", "unchanged"),
    ])
    result.hosts = [node1, HostResult("node2", "10.0.0.2", status="unreachable", error="timeout")]
    finding = Finding("node1", "rxe0/1", "port state", False, "ACTIVE", "DOWN", drift="corrective")
    result.verify = [HostVerification("node1", "10.0.0.1", status="failed", findings=[finding])]
    return result


def test_metrics_text_counts_drift_per_host_and_kind():
    text = render_metrics(_check_result(), now=1790000000)
    assert 'rdmaprov_drift_operations{cluster="lab",host="node1",drift="corrective"} 1' in text
    assert 'rdmaprov_drift_operations{cluster="lab",host="node1",drift="intentional"} 1' in text
    assert 'rdmaprov_drift_operations{cluster="lab",host="node2",drift="corrective"} 0' in text
    assert 'rdmaprov_drift_facts{cluster="lab",host="node1",drift="corrective"} 1' in text
    assert 'rdmaprov_host_reachable{cluster="lab",host="node2"} 0' in text
    assert 'rdmaprov_host_failed{cluster="lab",host="node1"} 1' in text
    assert 'rdmaprov_check_exit_code{cluster="lab"} 6' in text
    assert 'rdmaprov_check_last_run_timestamp_seconds{cluster="lab"} 1790000000' in text


def test_metrics_parse_as_prometheus_text(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    path = tmp_path / "textfile" / "rdmaprov.prom"
    write_textfile(str(path), render_metrics(_check_result()))
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert {"rdmaprov_drift_operations", "rdmaprov_drift_facts", "rdmaprov_check_exit_code"} <= set(families)
    assert [p.name for p in path.parent.iterdir()] == ["rdmaprov.prom"]  # no temp file left
