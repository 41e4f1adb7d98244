"""Batched fact reading: one combined command per host for several facts, its output split back
per fact. The splitting is tested on its own; the combined command runs for real on pyinfra's
@local host (a plain local shell: the facts here only print), whose round trips are counted."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, FactBase, Inventory, State, StringCommand
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from rdmaprov.engine.factcache import (
    FactCache,
    FactNeeded,
    _batch_command,
    _batchable,
    _key,
    fact,
    mark_current_host_changed,
    parse_batch,
    prefetch,
    read_batch,
    read_fact,
)
from rdmaprov.engine.pyinfra_state import connect
from rdmaprov.engine.run_context import EngineSettings, context_of, start_run

NONCE = "0a1b2c3d4e5f"


class Lines(FactBase):
    """Whatever `script` prints, as lines."""

    def command(self, script):
        return script

    def process(self, output):
        return output

    @staticmethod
    def default():
        return ["<default>"]


class Picky(FactBase):
    """Refuses output it cannot parse."""

    def command(self, script):
        return script

    def process(self, output):
        if output != ["ok"]:
            raise ValueError(f"cannot parse {output}")
        return "parsed"


class NeedsTool(FactBase):
    """A fact needing a binary: pyinfra checks for it first, so it is never batched."""

    def command(self):
        return "echo from-tool"

    def requires_command(self):
        return "sh"

    def process(self, output):
        return output


class OtherShell(FactBase):
    shell_executable = "bash"

    def command(self):
        return "echo bash"


class Structured(FactBase):
    def command(self):
        return StringCommand("echo", "structured")


def _local(batching: bool = True) -> tuple[State, object]:
    """A connected State over pyinfra's @local host, with this run's fact cache when batching."""
    state = State(Inventory((["@local"], {})), Config())
    context = start_run(state, EngineSettings(fact_batching=batching))
    if batching:
        context.facts = FactCache()
    assert connect(state) == {}
    state.set_stage(StateStage.Prepare)
    return state, state.inventory.get_host("@local")


def _trips(state: State) -> int:
    return context_of(state).round_trips["@local"]


def _wanted(*scripts: str, cls=Lines) -> dict:
    return {_key(cls, {"script": s}): {"script": s} for s in scripts}


def _values(state: State, cls=Lines) -> dict[str, object]:
    return {
        dict(key[1])["script"]: value
        for key, value in context_of(state).facts.values["@local"].items()
        if key[0] is cls
    }


def _batch(*scripts: str) -> list[str]:
    return _batch_command([(None, s) for s in scripts], NONCE)  # type: ignore[list-item]


# parse_batch: the combined output split back per fact


def test_parse_batch_splits_each_fact_with_its_status():
    lines = [f"@@{NONCE} 0", "a", "b", f"@@{NONCE} rc 0", f"@@{NONCE} 1", "c", f"@@{NONCE} rc 2"]
    assert parse_batch(lines, 2, NONCE) == {0: (0, ["a", "b"]), 1: (2, ["c"])}


def test_parse_batch_keeps_a_fact_with_empty_output():
    lines = [f"@@{NONCE} 0", f"@@{NONCE} rc 0", f"@@{NONCE} 1", "x", f"@@{NONCE} rc 0"]
    assert parse_batch(lines, 2, NONCE) == {0: (0, []), 1: (0, ["x"])}


def test_parse_batch_keeps_blank_lines_inside_a_facts_output():
    lines = [f"@@{NONCE} 0", "", "a", "", f"@@{NONCE} rc 0"]
    assert parse_batch(lines, 1, NONCE) == {0: (0, ["", "a", ""])}


def test_parse_batch_treats_markers_of_another_nonce_as_output():
    lines = [f"@@{NONCE} 0", "@@ffffffffffff 1", "@@ffffffffffff rc 0", f"@@{NONCE}x 1", f"@@{NONCE} rc 0"]
    assert parse_batch(lines, 2, NONCE) == {0: (0, ["@@ffffffffffff 1", "@@ffffffffffff rc 0", f"@@{NONCE}x 1"])}


def test_parse_batch_reads_a_status_after_output_without_a_newline():
    # A fact printing "x" with no newline shares its last line with the status marker.
    lines = [f"@@{NONCE} 0", f"echo '@@{NONCE} 1'", f"x@@{NONCE} rc 5", f"@@{NONCE} 1", "y", f"@@{NONCE} rc 0"]
    assert parse_batch(lines, 2, NONCE) == {0: (5, [f"echo '@@{NONCE} 1'", "x"]), 1: (0, ["y"])}


def test_parse_batch_leaves_out_a_fact_cut_off_before_its_status():
    lines = [f"@@{NONCE} 0", "a", f"@@{NONCE} rc 0", f"@@{NONCE} 1", "partial"]
    assert parse_batch(lines, 2, NONCE) == {0: (0, ["a"])}


def test_parse_batch_leaves_out_a_fact_whose_status_never_came_before_the_next_one():
    lines = [f"@@{NONCE} 0", "a", f"@@{NONCE} 1", "b", f"@@{NONCE} rc 0"]
    assert parse_batch(lines, 2, NONCE) == {1: (0, ["b"])}


def test_parse_batch_ignores_output_outside_facts_and_unknown_indexes():
    lines = [
        "motd banner",
        f"@@{NONCE} rc 0",
        f"@@{NONCE} 7",
        "x",
        f"@@{NONCE} rc 0",
        f"@@{NONCE} 0",
        "y",
        f"@@{NONCE} rc 0",
        "trailing",
    ]
    assert parse_batch(lines, 1, NONCE) == {0: (0, ["y"])}


def test_parse_batch_ignores_a_second_status_for_a_fact_already_closed():
    lines = [f"@@{NONCE} 0", "a", f"@@{NONCE} rc 0", "stray", f"@@{NONCE} rc 5"]
    assert parse_batch(lines, 1, NONCE) == {0: (0, ["a"])}


def test_parse_batch_of_no_output_finds_nothing():
    assert parse_batch([], 3, NONCE) == {}


# _batch_command: one script for several facts, each in its own subshell


def test_batch_command_wraps_each_fact_between_markers_in_order():
    script = _batch("echo one", "echo two")
    order = [f"'@@{NONCE} 0'", "echo one", f"'@@{NONCE} 1'", "echo two"]
    assert [script.index(part) for part in order] == sorted(script.index(part) for part in order)
    assert script.count(f"@@{NONCE} rc $?") == 2


def test_batch_command_closes_a_subshell_on_its_own_line_so_a_trailing_comment_cannot_swallow_it():
    assert "( echo one # comment\n) 2>/dev/null" in _batch("echo one # comment")


# _batchable: which facts can share a batch


def test_a_plain_shell_fact_is_batchable_with_its_arguments():
    assert _batchable(Lines, {"script": "uname -r"}) == "uname -r"


@pytest.mark.parametrize("cls", [NeedsTool, OtherShell, Structured])
def test_facts_needing_a_binary_another_shell_or_a_structured_command_are_not_batchable(cls):
    assert _batchable(cls, {}) is None


def test_fact_keys_ignore_argument_order():
    assert _key(Lines, {"a": 1, "b": 2}) == _key(Lines, {"b": 2, "a": 1}) != _key(Lines, {"a": 1, "b": 3})


# read_batch on a real host


def test_read_batch_reads_every_fact_in_one_round_trip():
    state, host = _local()
    read_batch(state, host, _wanted("echo a; echo '  b  '", "echo c"), context_of(state).facts)
    assert _values(state) == {"echo a; echo '  b  '": ["a", "  b  "], "echo c": ["c"]}
    assert _trips(state) == 1


def test_read_batch_gives_a_fact_with_no_output_its_default():
    state, host = _local()
    read_batch(state, host, _wanted("true", "echo after"), context_of(state).facts)
    assert _values(state) == {"true": ["<default>"], "echo after": ["after"]}


def test_read_batch_leaves_a_failed_fact_to_be_read_again_and_keeps_the_others():
    state, host = _local()
    read_batch(state, host, _wanted("echo before", "echo half; exit 3", "echo after"), context_of(state).facts)
    assert _values(state) == {"echo before": ["before"], "echo after": ["after"]}


def test_read_batch_leaves_a_fact_it_cannot_process_to_be_read_again():
    state, host = _local()
    wanted = {**_wanted("echo ok", "echo garbage", cls=Picky), **_wanted("echo fine")}
    read_batch(state, host, wanted, context_of(state).facts)
    assert _values(state, Picky) == {"echo ok": "parsed"} and _values(state) == {"echo fine": ["fine"]}


def test_read_batch_keeps_marker_like_output_as_the_facts_value():
    state, host = _local()
    script = "echo '@@0a1b2c3d4e5f 1'; echo '@@0a1b2c3d4e5f rc 9'; echo y # a comment"
    read_batch(state, host, _wanted(script, "echo next"), context_of(state).facts)
    assert _values(state) == {script: ["@@0a1b2c3d4e5f 1", "@@0a1b2c3d4e5f rc 9", "y"], "echo next": ["next"]}


def test_read_batch_keeps_stderr_out_of_values():
    state, host = _local()
    read_batch(state, host, _wanted("echo out; echo noise >&2"), context_of(state).facts)
    assert _values(state) == {"echo out; echo noise >&2": ["out"]}


def test_read_batch_reads_facts_that_cannot_be_batched_on_their_own():
    state, host = _local()
    cache = context_of(state).facts
    wanted = {**_wanted("echo batched"), _key(NeedsTool, {}): {}}
    with ctx_state.use(state):
        read_batch(state, host, wanted, cache)
    assert cache.values["@local"][_key(NeedsTool, {})] == ["from-tool"]
    assert _values(state) == {"echo batched": ["batched"]}
    assert _trips(state) == 2  # the batch, and the fact pyinfra read itself


def test_read_batch_reads_a_fact_whose_output_has_no_final_newline():
    state, host = _local()
    read_batch(state, host, _wanted("printf x", "echo next"), context_of(state).facts)
    assert _values(state) == {"printf x": ["x"], "echo next": ["next"]}


# prefetch: discover, read, repeat


def _dependent(seen: list):
    """An evaluation needing a fact that depends on another fact's value (as authorized_keys
    depends on the home directory SshIdentityFact reports)."""

    def evaluate(host) -> None:
        with ctx_host.use(host):
            try:
                home = fact(Lines, script="echo /home/ops")[0]
                seen.append(fact(Lines, script=f"echo {home}/.ssh/authorized_keys"))
            except FactNeeded:
                pass

    return evaluate


def test_prefetch_reads_dependent_facts_one_pass_each_and_then_stops():
    state, host = _local()
    seen: list = []
    prefetch(state, [host], _dependent(seen), seed={})
    assert _values(state) == {
        "echo /home/ops": ["/home/ops"],
        "echo /home/ops/.ssh/authorized_keys": ["/home/ops/.ssh/authorized_keys"],
    }
    assert _trips(state) == 2  # one batch per pass that found something new
    assert seen == [["/home/ops/.ssh/authorized_keys"]]  # the third evaluation had everything


def test_prefetch_stops_after_its_passes_and_leaves_the_rest_unread():
    state, host = _local()
    prefetch(state, [host], _dependent([]), seed={}, passes=1)
    assert _values(state) == {"echo /home/ops": ["/home/ops"]} and _trips(state) == 1
    assert context_of(state).facts.discovering is False


def test_prefetch_reads_seeded_facts_with_the_first_batch():
    state, host = _local()
    prefetch(state, [host], _dependent([]), seed={"@local": [(Lines, {"script": "echo seeded"})]}, passes=1)
    assert _values(state) == {"echo seeded": ["seeded"], "echo /home/ops": ["/home/ops"]} and _trips(state) == 1


def test_prefetch_ignores_wanted_facts_of_hosts_it_was_not_given():
    state, host = _local()
    evaluated: list = []
    prefetch(state, [host], evaluated.append, seed={"node9": [(Lines, {"script": "echo elsewhere"})]})
    assert context_of(state).facts.values == {} and _trips(state) == 0
    assert evaluated == [host]  # nothing to read for the given hosts: no second pass


def test_prefetch_without_a_cache_evaluates_nothing():
    state, host = _local(batching=False)
    called: list = []
    prefetch(state, [host], called.append, seed={"@local": [(Lines, {"script": "echo x"})]})
    assert called == [] and _trips(state) == 0


# FactCache: the run's values


def test_cache_discovering_notes_the_missing_fact_and_raises():
    state, host = _local()
    cache = context_of(state).facts
    cache.discovering = True
    with pytest.raises(FactNeeded, match="Lines on @local"):
        cache.get(host, Lines, {"script": "echo x"})
    assert cache.take_wanted() == {"@local": {_key(Lines, {"script": "echo x"}): {"script": "echo x"}}}
    assert cache.take_wanted() == {} and _trips(state) == 0


def test_cache_serves_a_value_it_holds_without_a_round_trip():
    state, host = _local()
    cache = context_of(state).facts
    cache.values["@local"] = {_key(Lines, {"script": "echo x"}): ["cached"]}
    assert cache.get(host, Lines, {"script": "echo x"}) == ["cached"] and _trips(state) == 0


def test_cache_reads_a_missing_fact_live_once_and_keeps_it():
    state, host = _local()
    cache = context_of(state).facts
    with ctx_state.use(state):
        first = cache.get(host, Lines, {"script": "echo live"})
        second = cache.get(host, Lines, {"script": "echo live"})
    assert first == second == ["live"] and _trips(state) == 1


def test_cache_reads_every_fact_live_on_a_host_changed_since():
    state, host = _local()
    cache = context_of(state).facts
    cache.values["@local"] = {_key(Lines, {"script": "echo now"}): ["before the change"]}
    cache.mark_changed("@local")
    with ctx_state.use(state):
        assert cache.get(host, Lines, {"script": "echo now"}) == ["now"]
        assert cache.get(host, Lines, {"script": "echo now"}) == ["now"]
    assert _trips(state) == 2


def test_a_host_counts_as_changed_only_while_executing():
    state, host = _local()
    cache = context_of(state).facts
    with ctx_state.use(state), ctx_host.use(host):
        mark_current_host_changed()
        assert cache.changed_hosts == set()  # planning or check: nothing has run
        state.set_stage(StateStage.Execute)
        state.is_executing = True  # as pyinfra's run_ops sets it
        mark_current_host_changed()
    assert cache.changed_hosts == {"@local"}


def test_read_fact_without_batching_asks_pyinfra_each_time():
    state, host = _local(batching=False)
    with ctx_state.use(state):
        assert read_fact(state, host, Lines, {"script": "echo plain"}) == ["plain"]
        assert read_fact(state, host, Lines, {"script": "echo plain"}) == ["plain"]
    assert _trips(state) == 2


def test_fact_inside_an_operation_context_uses_the_runs_cache():
    state, host = _local()
    context_of(state).facts.values["@local"] = {_key(Lines, {"script": "echo x"}): ["from the batch"]}
    with ctx_state.use(state), ctx_host.use(host):
        assert fact(Lines, script="echo x") == ["from the batch"]
    assert _trips(state) == 0


def test_a_cluster_fact_is_looked_up_once_per_discovery_pass_however_many_ask(monkeypatch):
    """Every host's operations ask for the same cluster fact; before, each asking looked at every
    host (n² lookups a pass, a third of a 128-host check's CPU). Once per pass sees the same."""
    from rdmaprov.engine import cluster

    state, host = _local()
    lookups: list[bool] = []
    real = cluster.read_here

    def counted(*args):
        lookups.append(args[-1])
        return real(*args)

    monkeypatch.setattr(cluster, "read_here", counted)
    answers: list = []

    def evaluate(target) -> None:
        with ctx_host.use(target):
            for _ in range(5):  # five operations asking
                try:
                    answers.append(cluster.cluster_fact(Lines, script="echo keys"))
                except FactNeeded:
                    pass

    prefetch(state, [host], evaluate, seed={})
    assert lookups == [True, True]  # pass 1 finds it missing (and wants it), pass 2 sees it
    assert answers == [{"@local": ["keys"]}] * 5 and _trips(state) == 1
    with ctx_state.use(state), ctx_host.use(host):
        assert cluster.cluster_fact(Lines, script="echo keys") == {"@local": ["keys"]}
        assert cluster.cluster_fact(Lines, script="echo keys") == {"@local": ["keys"]}
    assert lookups == [True, True, False]  # then read once for the run, from the batch
