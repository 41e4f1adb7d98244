"""The parts of pyinfra that rdmaprov's engine relies on beyond its documented API, pinned: a
pyinfra upgrade that moves or renames one fails here, by name, instead of deep inside a run."""

from __future__ import annotations

import inspect
from importlib import import_module

import gevent
from pyinfra.api import (
    Config,
    FactBase,
    FileDownloadCommand,
    FileUploadCommand,
    FunctionCommand,
    Inventory,
    State,
    StringCommand,
)
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.facts import get_fact
from pyinfra.api.operations import run_ops
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.operations.files import managed_file


def _params(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_state_and_host_attributes_the_engine_reads():
    inventory = Inventory((["node1"], {}))
    state = State(inventory, Config())
    host = inventory.get_host("node1")
    for name in ("active_hosts", "failed_hosts", "inventory", "op_meta", "ops", "is_executing"):
        assert hasattr(state, name), f"State.{name}"
    for name in ("get_op_data_for_host", "set_stage", "add_callback_handler"):
        assert callable(getattr(state, name)), f"State.{name}()"
    for name in ("name", "data", "connector", "op_hash_order", "current_op_hash"):
        assert hasattr(host, name), f"Host.{name}"
    for name in ("get_fact", "run_shell_command", "put_file", "noop"):
        assert callable(getattr(host, name)), f"Host.{name}()"
    assert {"Connect", "Prepare", "Execute", "Disconnect"} <= {stage.name for stage in StateStage}
    assert all(hasattr(ctx, name) for ctx in (ctx_host, ctx_state) for name in ("use", "isset", "get"))


def test_signatures_the_engine_calls():
    assert _params(get_fact)[:3] == ["state", "host", "cls"] and {"kwargs", "apply_failed_hosts"} <= set(
        _params(get_fact)
    )
    assert _params(run_ops)[0] == "state"
    assert _params(connect_all)[0] == "state" and _params(disconnect_all)[0] == "state"
    assert _params(BaseStateCallback.operation_host_success)[:4] == ["state", "host", "op_hash", "retry_count"]
    assert _params(BaseStateCallback.operation_host_error)[:4] == ["state", "host", "op_hash", "retry_count"]
    assert _params(BaseStateCallback.host_connect_error) == ["state", "host", "error"]
    assert {"process", "default", "requires_command"} <= set(dir(FactBase))
    assert all(
        isinstance(kind, type)
        for kind in (StringCommand, FileUploadCommand, FileDownloadCommand, FunctionCommand, PyinfraError)
    )


def test_operation_results_and_command_output():
    meta = import_module("pyinfra.api.operation").OperationMeta
    for name in ("is_complete", "did_error", "did_change", "will_change", "stdout_lines", "stderr_lines"):
        assert hasattr(meta, name), f"OperationMeta.{name}"
    util = import_module("pyinfra.connectors.util")
    output = util.CommandOutput([util.OutputLine("stdout", "a"), util.OutputLine("stderr", "b")])
    assert output.stdout_lines == ["a"] and [
        line.line for line in output.combined_lines if line.buffer_name == "stderr"
    ] == ["b"]


def test_operations_keep_their_generator_for_testing_and_planning():
    # tests/support/ops.py and the engine's discovery iterate operations' generators directly.
    assert inspect.isgeneratorfunction(managed_file._inner)


def test_gevent_hub_lets_the_engine_mark_pyinfra_errors_as_results():
    assert isinstance(gevent.get_hub().NOT_ERROR, tuple)


def test_global_arguments_are_looked_up_where_the_engine_remembers_them():
    """engine/pyinfra_state.py replaces pyinfra's all_global_arguments (type hints worked out on
    every operation call and fact read) by its first answer, in both modules that call it."""
    from typing import get_type_hints

    from pyinfra.api import arguments, facts

    import rdmaprov.engine.pyinfra_state  # noqa: F401

    assert "all_global_arguments()" in inspect.getsource(arguments.pop_global_arguments)
    assert "all_global_arguments()" in inspect.getsource(
        facts.get_fact
    ) or "all_global_arguments()" in inspect.getsource(facts)
    assert arguments.all_global_arguments() == list(get_type_hints(arguments.AllArguments).items())
    assert facts.all_global_arguments is arguments.all_global_arguments


def test_callbacks_get_state_and_host_only_under_those_names():
    # FunctionCommand passes (state, host) first only to a callback whose parameters are named so;
    # any other callback gets its own arguments alone (the munge key copy once failed that way).
    from rdmaprov.operations.builds import _commit
    from rdmaprov.operations.slurm import _copy_key

    inventory = Inventory((["node1"], {}))
    state = State(inventory, Config())
    host = inventory.get_host("node1")
    seen = []

    def named(state, host, word):
        seen.append((state, host, word))

    FunctionCommand(named, ("key",), {}).execute(state, host, {})
    assert seen == [(state, host, "key")]
    for callback in (_commit, _copy_key):
        assert _params(callback)[:2] == ["state", "host"], callback.__name__
