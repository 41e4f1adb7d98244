"""The run context: one per pyinfra State, settings read once, notes shown by plain pyinfra."""

from __future__ import annotations

from pyinfra.api import Config, Inventory, State

from rdmaprov.engine.notes import NotesPrinter
from rdmaprov.engine.run_context import EngineSettings, context_of, start_run


def _state() -> State:
    return State(Inventory(([("node1", {}), ("node2", {})], {})), Config())


def test_each_state_has_its_own_context_and_a_plain_one_without_a_run(monkeypatch):
    plain_state, run_state = _state(), _state()
    assert context_of(plain_state) is context_of(plain_state)  # made once, on first use
    assert context_of(plain_state).facts is None and context_of(plain_state).settings == EngineSettings()
    monkeypatch.setenv("RDMAPROV_FACT_BATCH", "0")
    run = start_run(run_state)
    assert run.settings.fact_batching is False  # read from the environment when the run starts
    assert context_of(run_state) is run and context_of(plain_state) is not run


def test_plain_pyinfra_prints_each_warning_and_owed_reboot_once():
    state, lines = _state(), []
    notes = context_of(state).notes
    notes.warnings["node1"] = ["mirror key is world-readable"]
    notes.reboots["node1"] = ["ib_core netns_mode exclusive takes effect at the next boot"]
    printer = NotesPrinter(lines.append)
    host = state.inventory.get_host("node1")
    printer.operation_host_success(state, host, "op1")
    printer.operation_host_error(state, host, "op2")
    printer.show(state, "node2")
    assert lines == [
        "node1: warning: mirror key is world-readable",
        "node1: reboot required: ib_core netns_mode exclusive takes effect at the next boot",
    ]
