"""Day-2 pieces that need no hosts: batching, drift classification, the applied record, metrics."""

from __future__ import annotations

import json

import pytest

from rdmaprov.deploys.limits import limits
from rdmaprov.engine import RunOptions
from rdmaprov.engine.applied import AppliedRecord, classify, classify_fact, merged_record, parse_record
from rdmaprov.engine.desired import fingerprint
from rdmaprov.engine.results import HostResult, OpResult, RunResult
from rdmaprov.errors import UserError
from rdmaprov.facts.files import FileState, ManagedFile
from rdmaprov.facts.ssh import SshIdentityFact
from rdmaprov.health.findings import Finding, check_deploy
from rdmaprov.health.gates.pairs import newcomer_pairs
from rdmaprov.health.verify import HostVerification
from rdmaprov.inventory import load_inventory
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.ssh import login_key
from rdmaprov.parsers.ssh import SshIdentity
from rdmaprov.report.textfile import render_metrics, write_textfile
from rdmaprov.workflows import rolling
from rdmaprov.workflows.rolling import Hooks, batch_size, batches, parse_max_fail, rolling_apply
from tests.support.ops import run_notes
from tests.support.promtool import promtool_check


@pytest.mark.parametrize(
    ("serial", "total", "size"),
    [(None, 7, 7), ("1", 3, 1), ("4", 10, 4), ("25%", 10, 3), ("100%", 10, 10), ("1%", 10, 1)],
)
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


# rolling_apply: batches in order, stopping over --max-fail. The engine's run (SSH) is replaced by
# one that reports each host as `outcome` says; everything around it is the real workflow.


class FakeEngine:
    """Stands in for engine.run: records each batch's options and reports the outcome asked for."""

    def __init__(self, outcome: dict[str, str] | None = None) -> None:
        self.outcome = outcome or {}
        self.calls: list[RunOptions] = []

    def __call__(self, inventory, options, observer=None) -> RunResult:
        self.calls.append(options)
        hosts = [
            HostResult(name, inventory.hosts[name].address, status=self.outcome.get(name, "unchanged"))
            for name in options.hosts
        ]
        started = f"2026-01-01T00:00:0{len(self.calls)}+00:00"
        return RunResult(options.command, str(inventory.path), inventory.name, started, 1.5, hosts)


def _rolling(tmp_path, monkeypatch, size, max_fail=None, outcome=None, verify_failures=(), hosts=5):
    """rolling_apply over n1..n<hosts>: (merged result, engine, log lines, after_batch calls)."""
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster:\n  name: c\nhosts:\n" + "".join(f"  n{i}: {{address: 10.0.0.{i}}}\n" for i in range(1, hosts + 1))
    )
    inventory = load_inventory(path, require_files=False)
    engine, log, after = FakeEngine(outcome), [], []
    monkeypatch.setattr(rolling, "run", engine)

    def after_batch(result, batch):
        after.append((list(batch), [h.name for h in result.hosts]))
        result.verify = [HostVerification(n, "a", status="failed" if n in verify_failures else "ok") for n in batch]

    options = RunOptions("apply", list(inventory.hosts), [limits], host_deploys={"n1": {"limits"}})
    merged = rolling_apply(inventory, options, size, max_fail, Hooks(after_batch, log.append))
    return merged, engine, log, after


def test_rolling_apply_runs_each_batch_in_order_with_the_same_deploys(tmp_path, monkeypatch):
    merged, engine, log, after = _rolling(tmp_path, monkeypatch, 2)
    assert [call.hosts for call in engine.calls] == [["n1", "n2"], ["n3", "n4"], ["n5"]]
    assert all(
        call.command == "apply" and call.deploys == [limits] and call.host_deploys == {"n1": {"limits"}}
        for call in engine.calls
    )
    assert log == ["batch 1/3: n1, n2", "batch 2/3: n3, n4", "batch 3/3: n5"]
    assert after == [(["n1", "n2"], ["n1", "n2"]), (["n3", "n4"], ["n3", "n4"]), (["n5"], ["n5"])]
    assert [(h.name, h.batch) for h in merged.hosts] == [("n1", 1), ("n2", 1), ("n3", 2), ("n4", 2), ("n5", 3)]


def test_rolling_apply_in_one_batch_logs_no_batch_line(tmp_path, monkeypatch):
    merged, engine, log, _ = _rolling(tmp_path, monkeypatch, 5)
    assert [call.hosts for call in engine.calls] == [["n1", "n2", "n3", "n4", "n5"]] and log == []
    assert {h.batch for h in merged.hosts} == {1} and merged.exit_code == 0


def test_rolling_apply_merges_every_batch_into_one_result(tmp_path, monkeypatch):
    merged, _, _, _ = _rolling(tmp_path, monkeypatch, 2, verify_failures=("n4",))
    assert merged.started_at == "2026-01-01T00:00:01+00:00"  # the first batch's
    assert merged.duration_s == 4.5
    assert [(v.name, v.status) for v in merged.verify] == [
        ("n1", "ok"),
        ("n2", "ok"),
        ("n3", "ok"),
        ("n4", "failed"),
        ("n5", "ok"),
    ]
    assert merged.exit_code == 4


def test_rolling_apply_stops_after_a_batch_over_max_fail_and_reports_the_rest_skipped(tmp_path, monkeypatch):
    merged, engine, log, _ = _rolling(tmp_path, monkeypatch, 2, max_fail=0.25, outcome={"n2": "failed"})
    reason = "not run: 1 of 2 hosts in batch 1 failed, over --max-fail 25%"
    assert [call.hosts for call in engine.calls] == [["n1", "n2"]]
    assert [(h.name, h.status, h.batch) for h in merged.hosts] == [
        ("n1", "unchanged", 1),
        ("n2", "failed", 1),
        ("n3", "skipped", 2),
        ("n4", "skipped", 2),
        ("n5", "skipped", 3),
    ]
    assert all(h.error == reason for h in merged.hosts[2:]) and [h.address for h in merged.hosts[2:]] == [
        "10.0.0.3",
        "10.0.0.4",
        "10.0.0.5",
    ]
    assert log == ["batch 1/3: n1, n2", reason]
    assert merged.exit_code == 4 and merged.summary()["skipped"] == 3


def test_rolling_apply_stops_later_too(tmp_path, monkeypatch):
    merged, engine, _, _ = _rolling(tmp_path, monkeypatch, 2, max_fail=0.0, outcome={"n3": "failed"})
    assert [call.hosts for call in engine.calls] == [["n1", "n2"], ["n3", "n4"]]
    assert [(h.name, h.status, h.batch) for h in merged.hosts][-1] == ("n5", "skipped", 3)
    assert merged.hosts[-1].error == "not run: 1 of 2 hosts in batch 2 failed, over --max-fail 0%"


def test_rolling_apply_at_exactly_max_fail_goes_on(tmp_path, monkeypatch):
    merged, engine, _, _ = _rolling(tmp_path, monkeypatch, 2, max_fail=0.5, outcome={"n1": "failed", "n3": "failed"})
    assert len(engine.calls) == 3 and "skipped" not in {h.status for h in merged.hosts}


def test_rolling_apply_without_max_fail_never_stops(tmp_path, monkeypatch):
    outcome = dict.fromkeys(["n1", "n2", "n3", "n4", "n5"], "failed")
    merged, engine, _, _ = _rolling(tmp_path, monkeypatch, 2, outcome=outcome)
    assert len(engine.calls) == 3 and [h.status for h in merged.hosts] == ["failed"] * 5


def test_rolling_apply_counts_unreachable_hosts_and_failed_verification(tmp_path, monkeypatch):
    merged, engine, _, _ = _rolling(
        tmp_path, monkeypatch, 2, max_fail=0.5, outcome={"n1": "unreachable"}, verify_failures=("n2",)
    )
    assert len(engine.calls) == 1  # 2 of 2 failed
    assert merged.hosts[-1].error == "not run: 2 of 2 hosts in batch 1 failed, over --max-fail 50%"


def test_rolling_apply_counts_a_host_failing_twice_once(tmp_path, monkeypatch):
    merged, engine, _, _ = _rolling(
        tmp_path, monkeypatch, 2, max_fail=0.5, outcome={"n1": "failed"}, verify_failures=("n1",)
    )
    assert len(engine.calls) == 3  # 1 of 2, not over 50%


def test_rolling_apply_skips_nothing_when_the_last_batch_fails(tmp_path, monkeypatch):
    merged, engine, log, _ = _rolling(tmp_path, monkeypatch, 2, max_fail=0.0, outcome={"n5": "failed"})
    assert len(engine.calls) == 3 and [h.name for h in merged.hosts] == ["n1", "n2", "n3", "n4", "n5"]
    assert not any(line.startswith("not run") for line in log)


def test_fingerprint_is_stable_and_sensitive():
    a = fingerprint((), {"path": "/etc/nccl.conf", "content": "NCCL_DEBUG=WARN\n"})
    assert a == fingerprint((), {"content": "NCCL_DEBUG=WARN\n", "path": "/etc/nccl.conf"})
    assert a != fingerprint((), {"path": "/etc/nccl.conf", "content": "NCCL_DEBUG=INFO\n"})


def test_shared_arguments_are_encoded_once_and_fingerprint_as_before():
    """ssh_trust hands every node the same read-only cluster lists: encoded once per run, with
    the text (and so the fingerprints nodes recorded) json.dumps gave the whole call."""
    import hashlib
    import json
    from types import MappingProxyType

    names = tuple(f"node{n}" for n in range(300))
    addresses = MappingProxyType({name: f"10.0.{n // 250}.{n % 250}" for n, name in enumerate(names)})
    cases = [
        ((), {"cluster": names, "addresses": addresses, "marker": "rdmaprov cluster c", "user": "root"}),
        (("/etc/hosts", names), {"mode": "644", "data": b"\x00", "nested": {"b": [1.5, None], "a": True}}),
        ((), {}),
        (("é",), {"lines": (), "map": MappingProxyType({})}),
    ]
    shared: dict = {}
    for args, kwargs in cases:
        plain = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in kwargs.items()}
        text = json.dumps(
            [list(args), plain], sort_keys=True, default=lambda v: "sha256:" + hashlib.sha256(v).hexdigest()
        )
        before = hashlib.sha256(text.encode()).hexdigest()[:16]
        assert fingerprint(args, kwargs) == fingerprint(args, kwargs, shared) == before
    assert {id(names), id(addresses)} <= set(shared)
    # the cached text is what is used: a second node's call does not encode the lists again
    shared[id(names)] = (names, '["stand-in"]')
    assert fingerprint((), {"cluster": names}, shared) == fingerprint((), {"cluster": ["stand-in"]})
    # a list can change between nodes, so it is never cached
    lines = ["a"]
    fingerprint((), {"lines": lines}, shared)
    assert id(lines) not in shared


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
    # An IB port going down is the hardware's doing, whatever the inventory says: apply cannot
    # put it back, on a node applied before or not.
    assert check_deploy("rdma.port_state", "infiniband") is None
    assert classify_fact(check_deploy("rdma.port_state", "infiniband"), True, ["softroce"]) == "manual"
    assert classify_fact(check_deploy("gpu.xid", "infiniband"), False, []) == "manual"


def test_every_check_verify_makes_has_an_id_and_the_deploy_behind_it():
    from rdmaprov.deploys import STACK
    from rdmaprov.health.findings import CHECKS

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
    assert (
        run_notes(
            login_key,
            {SshIdentityFact: identity, ManagedFile: converged},
            user="ops",
            public_key=key,
            marker="rdmaprov operator lab",
        )[0]
        == []
    )


def _check_result() -> RunResult:
    result = RunResult("check", "lab.yaml", "lab", "2026-11-21T00:00:00+00:00", duration_s=3.25)
    node1 = HostResult(
        "node1",
        "10.0.0.1",
        status="changed",
        ops=[
            OpResult("nccl.conf", "would_change", drift="corrective"),
            OpResult("memlock", "would_change", drift="intentional"),
            OpResult("packages", "unchanged"),
        ],
    )
    result.hosts = [node1, HostResult("node2", "10.0.0.2", status="unreachable", error="timeout")]
    finding = Finding(
        "node1", "rxe0/1", "port state", False, "ACTIVE", "DOWN", drift="corrective", id="rdma.port_state"
    )
    fine = Finding("node1", "gpu0", "Xid errors since boot", True, "no hardware Xid", "none", id="gpu.xid")
    site = Finding(
        "node1", "memlock", "login limit", False, "unlimited", "65536", drift="manual", id="limits.memlock_login"
    )
    result.verify = [HostVerification("node1", "10.0.0.1", status="failed", findings=[finding, fine, site])]
    return result


def test_metrics_text_counts_drift_per_host_and_kind():
    text = render_metrics(_check_result(), now=1790000000)
    assert 'rdmaprov_drift_operations{cluster="lab",host="node1",drift="corrective"} 1' in text
    assert 'rdmaprov_drift_operations{cluster="lab",host="node1",drift="intentional"} 1' in text
    assert 'rdmaprov_drift_operations{cluster="lab",host="node2",drift="corrective"} 0' in text
    assert 'rdmaprov_drift_facts{cluster="lab",host="node1",drift="corrective"} 1' in text
    assert 'rdmaprov_drift_facts{cluster="lab",host="node1",drift="manual"} 1' in text
    assert 'drift="manual"' not in text.split("# HELP rdmaprov_drift_facts")[0]  # no operation is manual
    assert 'rdmaprov_host_reachable{cluster="lab",host="node2"} 0' in text
    assert 'rdmaprov_host_failed{cluster="lab",host="node1"} 1' in text
    assert 'rdmaprov_check_exit_code{cluster="lab"} 6' in text
    assert 'rdmaprov_check_failures{cluster="lab",host="node1",check="rdma.port_state"} 1' in text
    assert 'rdmaprov_check_failures{cluster="lab",host="node1",check="gpu.xid"} 0' in text
    assert 'rdmaprov_check_last_run_timestamp_seconds{cluster="lab"} 1790000000' in text


def test_metrics_parse_as_prometheus_text(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    path = tmp_path / "textfile" / "rdmaprov.prom"
    write_textfile(str(path), render_metrics(_check_result()))
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert {
        "rdmaprov_drift_operations",
        "rdmaprov_drift_facts",
        "rdmaprov_check_failures",
        "rdmaprov_check_exit_code",
    } <= set(families)
    assert [p.name for p in path.parent.iterdir()] == ["rdmaprov.prom"]  # no temp file left


def test_textfile_promtool_finds_nothing_to_lint(tmp_path):
    """The file node_exporter serves, every family present (gates too), in base units and names."""
    from rdmaprov.health.gates.result import GateResult
    from rdmaprov.health.gates.subject import Subject

    result = _check_result()
    result.gates = [GateResult("ib_write_bw", Subject.parse("node1 -> node2"), False, "slow", status="fail")]
    path = tmp_path / "rdmaprov.prom"
    write_textfile(str(path), render_metrics(result, now=1790000000))
    assert "rdmaprov_gate_passed{" in path.read_text()
    assert promtool_check(path.read_text()) == (0, "")


def test_every_host_the_gates_leave_out_is_named_with_why(tmp_path, monkeypatch):
    """converge with the engine and the node reads replaced: which hosts the gates run over, and
    the reason recorded for each one left out (never a gate silently missing from the report)."""
    from io import StringIO

    from rich.console import Console

    from rdmaprov.health.gates.result import GateResult
    from rdmaprov.health.gates.subject import Subject
    from rdmaprov.health.report import print_gates_not_run
    from rdmaprov.health.verify import Health
    from rdmaprov.workflows import apply
    from rdmaprov.workflows.apply import ConvergeSettings, converge

    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster:\n  name: c\nhosts:\n" + "".join(f"  n{i}: {{address: 10.0.0.{i}}}\n" for i in range(1, 6))
    )
    inventory = load_inventory(path, require_files=False)
    monkeypatch.setattr(rolling, "run", FakeEngine({"n1": "failed", "n2": "unreachable"}))
    gated: list[list[str]] = []

    def post_deploy(inventory, hosts, gates, verify=True, gate_hosts=None, **_):
        verifications = [HostVerification(n, "a", status="failed" if n == "n3" else "ok") for n in hosts]
        chosen = gate_hosts(verifications) if gate_hosts else hosts
        gated.append(chosen)
        return Health(
            verifications, [GateResult("ib_write_bw", Subject.parse("n4 -> n5"), True, "ok")] if chosen else []
        )

    monkeypatch.setattr(apply, "post_deploy", post_deploy)
    options = RunOptions("apply", list(inventory.hosts), [limits])
    result = converge(inventory, options, ConvergeSettings(), lambda line: None)
    assert gated == [["n4", "n5"]]
    assert result.gates_not_run == {
        "n1": "apply failed on it",
        "n2": "it could not be reached",
        "n3": "it failed verify",
    }
    assert result.to_json()["gates_not_run"] == result.gates_not_run
    shown = StringIO()
    print_gates_not_run(result.gates_not_run, Console(file=shown, width=200))
    assert shown.getvalue().splitlines() == [
        "gates not run on n1: apply failed on it",
        "gates not run on n2: it could not be reached",
        "gates not run on n3: it failed verify",
    ]

    # one host left: no gates, and that host says why too
    monkeypatch.setattr(rolling, "run", FakeEngine({"n1": "failed", "n2": "unreachable", "n5": "failed"}))
    alone = converge(inventory, options, ConvergeSettings(), lambda line: None)
    assert alone.gates == [] and alone.gates_not_run["n4"].startswith("only n4 was left to test")
    # gates not asked for: nothing to explain
    quiet = converge(inventory, options, ConvergeSettings(gates=False), lambda line: None)
    assert quiet.gates_not_run == {} and "gates_not_run" not in quiet.to_json()
