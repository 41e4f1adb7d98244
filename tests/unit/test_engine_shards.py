"""The coordination of a run split across processes (engine/shards.py), with real forked shards
whose work is small functions: lockstep, leaving a family of steps, progress events, Ctrl-C passed
on once, a shard interrupted or crashing. The same code runs real pyinfra States in the
end-to-end test that compares sharded and single-process runs on real SSH hosts."""

from __future__ import annotations

import os
import signal

import gevent
import pytest

from rdmaprov.engine.results import HostResult, RunResult
from rdmaprov.engine.shards import HOSTS_PER_SHARD, ShardLink, run_sharded, shard_count, split

HOSTS = [f"node{i}" for i in range(1, 8)]


def _result(hosts: list[str], **fields) -> RunResult:
    result = RunResult("check", "inv.yaml", "c", "now", **fields)
    result.hosts = [HostResult(name, "10.0.0.1") for name in hosts]
    return result


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def phase(self, name: str, total: int) -> None:
        self.events.append(("phase", name, total))

    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None:
        self.events.append(("host_done", host, phase, ok))

    def op_done(self, host: str, op: str, status: str) -> None:
        self.events.append(("op_done", host, op, status))

    def note(self, text: str) -> None:
        self.events.append(("note", text))


def test_split_keeps_the_order_in_runs_of_nearly_equal_size():
    parts = split(HOSTS, 3)
    assert parts == [["node1", "node2", "node3"], ["node4", "node5"], ["node6", "node7"]]
    assert [h for part in parts for h in part] == HOSTS


def test_one_shard_per_core_once_each_gets_enough_hosts_and_a_forced_count_wins():
    assert shard_count(HOSTS_PER_SHARD * 2 - 1, None, cpus=16) == 1
    assert shard_count(HOSTS_PER_SHARD * 2, None, cpus=16) == 2
    assert shard_count(2000, None, cpus=16) == 16
    assert shard_count(2000, None, cpus=2) == 2
    assert shard_count(3, 8, cpus=2) == 3  # never more shards than hosts
    assert shard_count(2000, 1, cpus=16) == 1


def test_lockstep_gives_every_shard_every_payload_and_a_shard_that_left_is_not_waited_for():
    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        counts = link.sync(("connected", None), len(hosts))
        if link.index == 0:
            link.leave("op")  # no operations here: the others must not wait for it
        else:
            for op in ("a", "b", "c"):
                link.sync(("op", op), None)
        link.sync(("finished", None), None)
        result = _result(hosts)
        result.hosts[0].warnings = [f"saw {sum(counts)} hosts"]
        return result

    parts = run_sharded(HOSTS, 3, Recorder(), work)
    assert [[h.name for h in part.hosts] for part in parts] == split(HOSTS, 3)
    assert {part.hosts[0].warnings[0] for part in parts} == {"saw 7 hosts"}


def test_progress_reaches_the_observer_with_each_phase_once_and_a_shared_note_once():
    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        observer.phase("connect", len(HOSTS))
        for host in hosts:
            observer.host_done(host, "connect", True)
        observer.note("interrupted: no new operations start")
        observer.note(f"{hosts[0]}: waiting for the dpkg lock")
        link.sync(("finished", None), None)
        return _result(hosts)

    recorder = Recorder()
    run_sharded(HOSTS, 2, recorder, work)
    events = recorder.events
    assert events.count(("phase", "connect", 7)) == 1
    assert sorted(e[1] for e in events if e[0] == "host_done") == sorted(HOSTS)
    assert events.count(("note", "interrupted: no new operations start")) == 1
    assert ("note", "node1: waiting for the dpkg lock") in events and (
        "note",
        "node5: waiting for the dpkg lock",
    ) in events


def test_ctrl_c_at_the_coordinator_reaches_each_shard_once():
    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        seen: list[int] = []
        watcher = gevent.signal_handler(signal.SIGINT, lambda: seen.append(1))
        link.sync(("ready", None), None)
        while not seen:
            gevent.sleep(0.05)
        gevent.sleep(0.5)  # a second signal would arrive meanwhile
        watcher.cancel()
        return _result(hosts, interrupted=len(seen) == 1)

    def interrupt_soon() -> None:
        gevent.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)

    gevent.spawn(interrupt_soon)
    parts = run_sharded(HOSTS, 2, Recorder(), work)  # the coordinator itself must not raise
    assert [part.interrupted for part in parts] == [True, True]


def test_a_shard_stopped_by_ctrl_c_outside_an_apply_stops_the_run_as_one_process_would():
    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        if link.index == 1:
            raise KeyboardInterrupt
        link.sync(("finished", None), None)  # released once the interrupted shard is gone
        return _result(hosts)

    with pytest.raises(KeyboardInterrupt):
        run_sharded(HOSTS, 2, Recorder(), work)


def test_a_crashed_shard_fails_the_run_with_its_traceback_and_leaves_no_process(tmp_path):
    pids = tmp_path / "pids"

    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        with pids.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
        if link.index == 0:
            raise ValueError("planning exploded")
        link.sync(("finished", None), None)
        return _result(hosts)

    with pytest.raises(RuntimeError, match="ValueError: planning exploded"):
        run_sharded(HOSTS, 3, Recorder(), work)
    shards = [int(pid) for pid in pids.read_text().split()]
    assert len(shards) == 3
    for pid in shards:  # each one ended and was reaped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_what_a_host_comes_to_hold_reaches_the_other_shards_and_a_silent_one_times_out():
    """engine/board.py across processes: node1's shard says it holds the archive; node7's shard,
    waiting for it, goes on; nobody says anything about node2, so its waiter gives up."""
    from rdmaprov.engine.board import Board

    def work(hosts: list[str], observer, link: ShardLink) -> RunResult:
        board = Board()
        link.board = board
        board.publish = lambda item, host, holds: link.send(("board", item, host, holds))
        result = _result(hosts)
        link.sync(("ready", None), None)
        if link.index == 0:
            gevent.sleep(0.3)
            board.mark("blob.tar.gz", "node1", True)
        else:
            result.hosts[0].warnings = [
                f"node1: {board.wait('blob.tar.gz', 'node1', 10)}",
                f"node2: {board.wait('blob.tar.gz', 'node2', 0.5)}",
            ]
        link.sync(("finished", None), None)
        return result

    parts = run_sharded(HOSTS, 2, Recorder(), work)
    assert parts[1].hosts[0].warnings == ["node1: True", "node2: None"]


def test_a_board_mark_wakes_its_waiter_and_says_false_for_a_host_that_could_not():
    from rdmaprov.engine.board import Board

    board = Board()
    gevent.spawn_later(0.1, board.mark, "a", "node3", False)
    assert board.wait("a", "node3", 5) is False
    assert board.wait("a", "node4", 0.05) is None
