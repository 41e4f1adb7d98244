"""The engine runner's pure parts, on real pyinfra States whose hosts are never connected: how
commands are shown, how planned operations are keyed and skipped, and how check and apply turn
pyinfra's operation data into results."""

from __future__ import annotations

import hashlib
from io import BytesIO

import pytest
from pyinfra.api import (
    Config,
    FileDownloadCommand,
    FileUploadCommand,
    FunctionCommand,
    Inventory,
    State,
    StringCommand,
    deploy,
    operation,
)
from pyinfra.api.state import StateStage
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.deploys import STACK
from rdmaprov.engine.applied import AppliedRecord
from rdmaprov.engine.results import HostResult, OpResult
from rdmaprov.engine.run_context import context_of, start_run
from rdmaprov.engine.runner import (
    NullObserver,
    RunOptions,
    _Callbacks,
    _check_ops,
    _collect_applied,
    _name_ops,
    _never,
    _op_name,
    _Plan,
    _reason,
    _report_applied,
    _skipped,
    describe,
)


@operation()
def emits(commands: list):
    """Yields its commands as they are (none: the node is converged)."""
    yield from commands


@operation()
def breaks(message: str):
    raise ValueError(message)
    yield  # a generator, as every operation is


@deploy("alpha")
def alpha(ctx=None):
    emits(name="say", commands=["echo a"])
    emits(name="say", commands=[])
    emits(name="write", commands=["touch /x"])


@deploy("beta")
def beta(ctx=None):
    emits(name="say", commands=["echo b"])


@deploy("gamma")
def gamma(ctx=None):
    breaks(name="explode", message="no route to mirror\nsecond line")
    emits(name="after", commands=["echo never"])


def _state(*hosts: str) -> State:
    """A real pyinfra State over hosts that are never connected, planning (Prepare stage)."""
    state = State(Inventory((list(hosts), {})), Config(), check_for_changes=False)
    start_run(state)
    state.set_stage(StateStage.Prepare)
    return state


def _plan(state: State, steps: list, skip: dict[str, set[str]] | None = None) -> _Plan:
    """Plan `steps` (deploys) on every host as the runner does: a deploy a host does not run is
    planned with `_if=_never`; each deploy's operations are then named into the plan."""
    plan = _Plan()
    with ctx_state.use(state):
        for host in state.inventory:
            with ctx_host.use(host):
                for step in steps:
                    first = len(host.op_hash_order)
                    if step.__name__ in (skip or {}).get(host.name, set()):
                        step(ctx=None, _if=_never)
                    else:
                        step(ctx=None)
                    _name_ops(state, host, step.__name__, host.op_hash_order[first:], plan)
    return plan


def _keys(plan: _Plan, host: str) -> list[str]:
    return [key for (name, _), key in plan.keys.items() if name == host]


def _by_name(result: HostResult) -> dict[str, str]:
    return {op.name: op.status for op in result.ops}


# describe: what results show for each kind of pyinfra command


def test_describe_upload_from_memory_shows_size_and_sha256_prefix():
    data = b"NCCL_DEBUG=WARN\n"
    text = describe(FileUploadCommand(BytesIO(data), "/etc/nccl.conf.rdmaprov-tmp"))
    assert text == f"upload /etc/nccl.conf.rdmaprov-tmp (16 bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]})"


def test_describe_upload_from_memory_differs_when_content_differs():
    one = describe(FileUploadCommand(BytesIO(b"mtu 4200\n"), "/etc/x"))
    other = describe(FileUploadCommand(BytesIO(b"mtu 9000\n"), "/etc/x"))
    assert one != other
    assert one.startswith("upload /etc/x (9 bytes, sha256 ") and other.startswith("upload /etc/x (9 bytes, sha256 ")


def test_describe_upload_from_memory_does_not_consume_the_stream():
    source = BytesIO(b"payload")
    describe(FileUploadCommand(source, "/tmp/p"))
    assert source.read() == b"payload"  # pyinfra still uploads the whole content afterwards


def test_describe_empty_upload_shows_zero_bytes_and_the_empty_hash():
    empty = describe(FileUploadCommand(BytesIO(b""), "/etc/empty"))
    assert empty == "upload /etc/empty (0 bytes, sha256 e3b0c44298fc1c14)"


def test_describe_upload_from_a_path_names_the_local_file():
    assert (
        describe(FileUploadCommand("/var/cache/rdmaprov/x.tar.gz", "/opt/x.tar.gz"))
        == "upload /opt/x.tar.gz from /var/cache/rdmaprov/x.tar.gz"
    )


def test_describe_download_says_it_lands_on_the_control_machine():
    assert (
        describe(FileDownloadCommand("/opt/build/nccl.tgz", "/cache/nccl.tgz.part"))
        == "download /opt/build/nccl.tgz to /cache/nccl.tgz.part (control machine)"
    )


def test_describe_function_command_by_name_without_underscores_and_its_arguments():
    def _commit(archive, count):
        pass

    assert describe(FunctionCommand(_commit, ("nccl-2.21.tgz", 3), {})) == "commit nccl-2.21.tgz 3 (control machine)"


def test_describe_string_command_is_the_command_itself():
    assert describe(StringCommand("modprobe", "rdma_rxe")) == "modprobe rdma_rxe"


# _reason: one line for a result's error


def test_reason_is_the_first_line_of_the_message():
    assert _reason(ValueError("cannot fetch https://x\nTraceback follows\n...")) == "cannot fetch https://x"


@pytest.mark.parametrize("message", ["", "   ", "\n\n"])
def test_reason_of_a_blank_message_is_the_exception_type(message):
    assert _reason(RuntimeError(message)) == "RuntimeError"


def test_reason_of_an_exception_without_arguments_is_its_type():
    assert _reason(TimeoutError()) == "TimeoutError"


def test_reason_skips_leading_blank_lines():
    assert _reason(RuntimeError("\ncannot resolve mirror.example")) == "cannot resolve mirror.example"


# RunOptions.runs: which deploys a host runs (bootstrap: existing nodes only renew SSH trust)


def test_run_options_run_every_deploy_on_hosts_without_a_restriction():
    options = RunOptions("apply", ["new1"], list(STACK.values()), host_deploys={"old1": {"ssh_trust"}})
    assert all(options.runs("new1", deploy) for deploy in STACK.values())


def test_run_options_run_only_the_named_deploys_on_restricted_hosts():
    options = RunOptions("apply", ["old1", "new1"], list(STACK.values()), host_deploys={"old1": {"ssh_trust"}})
    assert [name for name, deploy in STACK.items() if options.runs("old1", deploy)] == ["ssh_trust"]


def test_run_options_with_an_empty_set_runs_nothing_on_that_host():
    options = RunOptions("apply", ["old1"], list(STACK.values()), host_deploys={"old1": set()})
    assert not any(options.runs("old1", deploy) for deploy in STACK.values())


# _name_ops: each operation's record key and deploy


def test_repeated_operation_names_are_numbered_in_planning_order():
    state = _state("node1")
    plan = _plan(state, [alpha, beta, alpha])
    assert _keys(plan, "node1") == [
        "alpha | say",
        "alpha | say #2",
        "alpha | write",
        "beta | say",
        "alpha | say #3",
        "alpha | say #4",
        "alpha | write #2",
    ]


def test_each_operation_key_records_its_deploy():
    state = _state("node1")
    plan = _plan(state, [alpha, beta])
    host = state.inventory.get_host("node1")
    assert [plan.deploys[("node1", h)] for h in host.op_hash_order] == ["alpha", "alpha", "alpha", "beta"]


def test_operation_keys_are_numbered_per_host():
    state = _state("node1", "node2")
    plan = _plan(state, [alpha, alpha])
    assert (
        _keys(plan, "node1")
        == _keys(plan, "node2")
        == ["alpha | say", "alpha | say #2", "alpha | write", "alpha | say #3", "alpha | say #4", "alpha | write #2"]
    )


def test_a_literal_numbered_name_is_not_given_to_a_second_operation():
    @deploy("delta")
    def delta(ctx=None):
        emits(name="say", commands=[])
        emits(name="say #2", commands=[])
        emits(name="say", commands=[])

    state = _state("node1")
    keys = _keys(_plan(state, [delta]), "node1")
    assert keys == ["delta | say", "delta | say #2", "delta | say #3"] and len(set(keys)) == 3


def test_naming_a_second_batch_of_operations_continues_the_numbering():
    state = _state("node1")
    plan = _plan(state, [beta])
    host = state.inventory.get_host("node1")
    with ctx_state.use(state), ctx_host.use(host):
        first = len(host.op_hash_order)
        beta(ctx=None)
        _name_ops(state, host, "beta", host.op_hash_order[first:], plan)
    assert _keys(plan, "node1") == ["beta | say", "beta | say #2"]


def test_operation_name_joins_the_names_hosts_gave_the_same_position():
    @deploy("epsilon")
    def epsilon(ctx=None):
        from pyinfra import host

        emits(name=f"configure {'ib0' if host.name == 'node1' else 'eth2'}", commands=[])

    state = _state("node1", "node2")
    _plan(state, [epsilon])
    op_hash = state.inventory.get_host("node1").op_hash_order[0]
    assert state.inventory.get_host("node2").op_hash_order[0] == op_hash  # pyinfra matches by position
    assert _op_name(state, op_hash) == "epsilon | configure eth2 / epsilon | configure ib0"


# _skipped / _never: deploys planned on a host but not run there


def test_operations_of_a_deploy_planned_with_never_are_skipped_and_the_others_not():
    state = _state("old1", "new1")
    _plan(state, [alpha, beta], skip={"old1": {"alpha"}})
    old, new = state.inventory.get_host("old1"), state.inventory.get_host("new1")
    assert [_skipped(state, old, h) for h in old.op_hash_order] == [True, True, True, False]
    assert [_skipped(state, new, h) for h in new.op_hash_order] == [False, False, False, False]


def test_never_inside_a_list_of_conditions_still_skips():
    state = _state("node1")
    host = state.inventory.get_host("node1")
    with ctx_state.use(state), ctx_host.use(host):
        emits(name="listed", commands=["x"], _if=[lambda: True, _never])
        emits(name="other condition", commands=["x"], _if=lambda: False)
        emits(name="other list", commands=["x"], _if=[lambda: True])
    assert [_skipped(state, host, h) for h in host.op_hash_order] == [True, False, False]


def test_never_is_false():
    assert _never() is False


# _check_ops: what `check` reports per operation


def _check(state: State, plan: _Plan, observer=None) -> dict[str, HostResult]:
    for host in state.inventory:
        state.activate_host(host)
    results = {host.name: HostResult(host.name, f"10.0.0.{i}") for i, host in enumerate(state.inventory, 1)}
    _check_ops(state, plan, results, observer or NullObserver())
    return results


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def phase(self, name, total):
        self.events.append(("phase", name, total))

    def host_done(self, host, phase, ok, detail=""):
        self.events.append(("host", host, phase, ok))

    def op_done(self, host, op, status):
        self.events.append(("op", host, op, status))


def test_check_reports_would_change_with_commands_and_unchanged_without():
    state = _state("node1")
    results = _check(state, _plan(state, [alpha]))
    ops = results["node1"].ops
    assert [(op.name, op.status, op.commands, op.deploy) for op in ops] == [
        ("alpha | say", "would_change", ["echo a"], "alpha"),
        ("alpha | say", "unchanged", [], "alpha"),
        ("alpha | write", "would_change", ["touch /x"], "alpha"),
    ]
    results["node1"].settle()
    assert results["node1"].status == "changed" and results["node1"].changed == 2


def test_check_leaves_out_operations_of_deploys_the_host_does_not_run():
    state = _state("old1", "new1")
    results = _check(state, _plan(state, [alpha, beta], skip={"old1": {"alpha"}}))
    assert [op.name for op in results["old1"].ops] == ["beta | say"]
    assert [op.name for op in results["new1"].ops] == ["alpha | say", "alpha | say", "alpha | write", "beta | say"]


def test_check_stops_a_host_at_an_operation_that_raises_and_keeps_the_first_line():
    state = _state("node1")
    recorder = Recorder()
    results = _check(state, _plan(state, [beta, gamma]), recorder)
    result = results["node1"]
    assert _by_name(result) == {"beta | say": "would_change", "gamma | explode": "failed"}
    assert result.ops[-1].stderr == ["no route to mirror"]
    assert result.status == "failed" and result.error == "gamma | explode: no route to mirror"
    assert ("op", "node1", "gamma | explode", "failed") in recorder.events
    assert not any(event[2] == "gamma | after" for event in recorder.events if event[0] == "op")


def test_check_classifies_each_would_be_change_against_the_applied_record():
    state = _state("node1")
    plan = _plan(state, [alpha])
    hashes = state.inventory.get_host("node1").op_hash_order
    desired = context_of(state).notes.desired
    desired[("node1", hashes[0])] = "fp-say"
    desired[("node1", hashes[2])] = "fp-write-new"
    plan.records["node1"] = AppliedRecord(ops={"alpha | say": "fp-say", "alpha | write": "fp-write-old"})
    result = _check(state, plan)["node1"]
    assert [op.drift for op in result.ops] == ["corrective", None, "intentional"]
    assert result.inputs_changed == ["alpha"]


def test_check_without_a_record_calls_every_change_new_and_no_inputs_changed():
    state = _state("node1")
    result = _check(state, _plan(state, [alpha, beta]))["node1"]
    assert [op.drift for op in result.ops] == ["new", None, "new", "new"]
    assert result.inputs_changed == []


def test_check_lists_a_deploy_whose_inputs_changed_once():
    state = _state("node1")
    plan = _plan(state, [alpha])
    hashes = state.inventory.get_host("node1").op_hash_order
    for op_hash in hashes:
        context_of(state).notes.desired[("node1", op_hash)] = "now"
    plan.records["node1"] = AppliedRecord(ops=dict.fromkeys(["alpha | say", "alpha | say #2", "alpha | write"], "then"))
    assert _check(state, plan)["node1"].inputs_changed == ["alpha"]


def test_check_attaches_the_noted_diff_to_its_operation():
    state = _state("node1")
    plan = _plan(state, [beta])
    op_hash = state.inventory.get_host("node1").op_hash_order[0]
    context_of(state).notes.diffs[("node1", op_hash)] = "-mtu 1500\n+mtu 4200"
    assert _check(state, plan)["node1"].ops[0].diff == "-mtu 1500\n+mtu 4200"


# _collect_applied: what `apply` reports from pyinfra's operation results


def _complete(state: State, host_name: str, index: int, success: bool, commands: list, stdout=(), stderr=()):
    host = state.inventory.get_host(host_name)
    meta = state.ops[host][host.op_hash_order[index]].operation_meta
    lines = [OutputLine("stdout", line) for line in stdout] + [OutputLine("stderr", line) for line in stderr]
    meta.set_complete(success, commands, CommandOutput(lines))


def _collect(state: State, plan: _Plan, failed: tuple[str, ...] = ()) -> dict[str, HostResult]:
    for host in state.inventory:
        state.activate_host(host)
    for name in failed:  # as pyinfra leaves a host whose operation failed
        state.active_hosts.discard(state.inventory.get_host(name))
        state.failed_hosts.add(state.inventory.get_host(name))
    results = {host.name: HostResult(host.name, "10.0.0.1") for host in state.inventory}
    _collect_applied(state, plan, results)
    return results


def test_apply_reports_changed_unchanged_and_the_commands_run():
    state = _state("node1")
    plan = _plan(state, [alpha])
    _complete(state, "node1", 0, True, [StringCommand("echo a")], stdout=["a"])
    _complete(state, "node1", 1, True, [])
    _complete(state, "node1", 2, True, [FileUploadCommand(BytesIO(b"x"), "/x")])
    ops = _collect(state, plan)["node1"].ops
    assert [op.status for op in ops] == ["changed", "unchanged", "changed"]
    assert [op.deploy for op in ops] == ["alpha", "alpha", "alpha"]
    assert ops[0].commands == ["echo a"] and ops[0].stdout == ["a"]
    assert ops[2].commands[0].startswith("upload /x (1 bytes, sha256 ")


def test_apply_failed_operation_gives_the_host_error_its_last_stderr_line():
    state = _state("node1")
    plan = _plan(state, [alpha])
    _complete(state, "node1", 0, True, [StringCommand("echo a")])
    _complete(
        state,
        "node1",
        1,
        False,
        [StringCommand("apt-get install x")],
        stderr=["Reading package lists...", "E: Unable to locate package x", "  "],
    )
    result = _collect(state, plan, failed=("node1",))["node1"]
    assert [op.status for op in result.ops] == ["changed", "failed", "skipped"]
    assert result.error == "alpha | say failed: E: Unable to locate package x"


def test_apply_failed_operation_without_stderr_names_only_the_operation():
    state = _state("node1")
    plan = _plan(state, [beta])
    _complete(state, "node1", 0, False, [StringCommand("false")])
    assert _collect(state, plan, failed=("node1",))["node1"].error == "beta | say failed"


def test_apply_blames_the_first_unfinished_operation_of_a_failed_host():
    state = _state("node1")
    plan = _plan(state, [alpha, beta])
    _complete(state, "node1", 0, True, [])
    result = _collect(state, plan, failed=("node1",))["node1"]
    assert [op.status for op in result.ops] == ["unchanged", "failed", "skipped", "skipped"]
    assert result.ops[1].name == "alpha | say" and "a fact or command failed" in result.ops[1].stderr[0]
    assert result.error == "alpha | say failed while reading the node's state"


def test_apply_does_not_blame_an_unfinished_operation_when_one_already_failed():
    state = _state("node1")
    plan = _plan(state, [alpha])
    _complete(state, "node1", 0, False, [StringCommand("false")], stderr=["boom"])
    result = _collect(state, plan, failed=("node1",))["node1"]
    assert [op.status for op in result.ops] == ["failed", "skipped", "skipped"]
    assert result.error == "alpha | say failed: boom"


def test_apply_on_a_healthy_host_reports_unfinished_operations_as_skipped():
    state = _state("node1")
    plan = _plan(state, [beta])
    result = _collect(state, plan)["node1"]
    assert [op.status for op in result.ops] == ["skipped"] and result.error is None


def test_apply_leaves_out_deploys_planned_only_and_unreachable_hosts():
    state = _state("old1", "gone1")
    plan = _plan(state, [alpha, beta], skip={"old1": {"alpha"}})
    _complete(state, "old1", 3, True, [StringCommand("echo b")])
    for host in state.inventory:
        state.activate_host(host)
    results = {host.name: HostResult(host.name, "10.0.0.1") for host in state.inventory}
    results["gone1"].status = "unreachable"
    _collect_applied(state, plan, results)
    assert [(op.name, op.status) for op in results["old1"].ops] == [("beta | say", "changed")]
    assert results["gone1"].ops == []


def test_apply_keeps_a_diff_only_for_a_change():
    state = _state("node1")
    plan = _plan(state, [alpha])
    hashes = state.inventory.get_host("node1").op_hash_order
    for op_hash in hashes:
        context_of(state).notes.diffs[("node1", op_hash)] = "+line"
    _complete(state, "node1", 0, True, [StringCommand("echo a")])
    _complete(state, "node1", 1, True, [])
    _complete(state, "node1", 2, True, [StringCommand("touch /x")])
    assert [op.diff for op in _collect(state, plan)["node1"].ops] == ["+line", None, "+line"]


# _Callbacks: progress as pyinfra reports it


def test_callbacks_report_finished_operations_by_name():
    state = _state("node1")
    _plan(state, [beta])
    host = state.inventory.get_host("node1")
    recorder = Recorder()
    callbacks = _Callbacks(recorder, lambda op_hash: _op_name(state, op_hash))
    callbacks.operation_host_success(state, host, host.op_hash_order[0])
    callbacks.operation_host_error(state, host, host.op_hash_order[0])
    assert recorder.events == [("op", "node1", "beta | say", "done"), ("op", "node1", "beta | say", "failed")]


def test_each_host_through_the_apply_phase_is_reported_finished_or_not():
    """A log (no progress bar) gets a line per host when the apply phase ends: done, or failed
    with its error; a host never reached is not reported again."""
    state = _state("node1", "node2", "node3")
    results = {name: HostResult(name, "10.0.0.1") for name in ("node1", "node2", "node3")}
    results["node1"].ops = [OpResult("alpha | say", "changed")]
    results["node2"].ops = [OpResult("alpha | say", "failed")]
    results["node2"].error = "alpha | say failed: no route to mirror"
    results["node3"].status, results["node3"].error = "unreachable", "Could not connect"
    recorder = Recorder()
    _report_applied(state, results, recorder)
    assert recorder.events == [("host", "node1", "apply", True), ("host", "node2", "apply", False)]
