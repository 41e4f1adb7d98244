"""Progress while a run goes on: the rich bar on a terminal, and plain lines with the time elapsed
where no bar can show (a log file, a pipe, cron, CI), so that a long apply's log shows life."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rdmaprov.report.progress import RichObserver
from tests.conftest import rdmaprov

ANSI = re.compile(r"\x1b\[")


class FakeClock:
    """time.monotonic as the test sets it: no test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_terminal_overrides(monkeypatch):
    """rich reads these to force or deny a terminal; the tests decide that themselves."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def plain_observer(verbose: bool = False) -> tuple[RichObserver, io.StringIO, FakeClock]:
    out, clock = io.StringIO(), FakeClock()
    observer = RichObserver(Console(file=out, width=200), verbose=verbose, clock=clock)
    assert observer.plain  # a StringIO is no terminal
    return observer, out, clock


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_log_gets_each_phase_and_each_host_finished_with_counts():
    observer, out, clock = plain_observer()
    with observer:
        clock.now += 5
        observer.phase("connect", 2)
        observer.host_done("node1", "connect", True)
        clock.now += 65
        observer.host_done("node2", "connect", False, "Could not connect [Errno 111]")
        observer.phase("plan", 1)
        observer.host_done("node1", "plan", True)
    assert lines(out) == [
        "[0:00:05] connect: 2 hosts",
        "[0:00:05] connect: node1 done (1/2)",
        "[0:01:10] connect: node2 failed (2/2): Could not connect [Errno 111]",  # brackets kept, not markup
        "[0:01:10] plan: 1 host",
        "[0:01:10] plan: node1 done (1/1)",
    ]
    assert not ANSI.search(out.getvalue())


def test_a_heartbeat_comes_after_30_seconds_without_a_line_and_not_before():
    observer, out, clock = plain_observer()
    with observer:
        observer.phase("apply", 2)
        for step in (10, 10, 9):
            clock.now += step
            observer.op_done("node1", "install RDMA packages", "done")
        assert lines(out) == ["[0:00:00] apply: 2 hosts"]  # 29 s: nothing yet

        clock.now += 1
        observer.op_done("node2", "write /etc/nccl.conf", "done")
        assert lines(out)[-1] == "[0:00:30] apply: 4 operations done; last node2: write /etc/nccl.conf (done)"

        clock.now += 29
        observer.op_done("node2", "sysctl", "done")
        assert len(lines(out)) == 2  # counted from the last line, not from the phase
        observer.host_done("node1", "apply", True)
        clock.now += 29
        observer.op_done("node2", "limits", "done")
        assert len(lines(out)) == 3  # a host's line shows life too
        clock.now += 1
        observer.op_done("node2", "modprobe", "done")
        assert lines(out)[-1] == "[0:01:29] apply: 7 operations done; last node2: modprobe (done)"

        observer.phase("verify", 1)
        clock.now += 30
        observer.op_done("node1", "ports", "done")
        assert lines(out)[-1] == "[0:01:59] verify: 1 operation done; last node1: ports (done)"  # counts per phase
    assert not ANSI.search(out.getvalue())


def test_a_log_gets_failed_operations_notes_and_with_verbose_every_operation():
    observer, out, clock = plain_observer(verbose=True)
    with observer:
        observer.phase("apply", 1)
        clock.now += 3
        observer.op_done("node1", "install [rdma] packages", "done")
        observer.note("node1: waiting for the dpkg lock")
        observer.op_done("node1", "write /etc/nccl.conf", "failed")
        clock.now += 60
        observer.op_done("node1", "sysctl", "done")
    assert lines(out) == [
        "[0:00:00] apply: 1 host",
        "[0:00:03]         done node1: install [rdma] packages",
        "[0:00:03] node1: waiting for the dpkg lock",
        "[0:00:03]       failed node1: write /etc/nccl.conf",
        "[0:01:03]         done node1: sysctl",  # every operation shown: no heartbeat needed
    ]
    assert not ANSI.search(out.getvalue())


def test_a_terminal_keeps_the_bar_and_prints_only_failures_and_notes():
    out, clock = io.StringIO(), FakeClock()
    observer = RichObserver(Console(file=out, force_terminal=True, width=120), clock=clock)
    assert not observer.plain
    with observer:
        observer.phase("plan", 2)
        observer.host_done("node1", "plan", True)
        clock.now += 60
        observer.op_done("node1", "install RDMA packages", "done")
        observer.host_done("node2", "plan", False, "planning failed: boom")
        observer.note("node1: waiting for the dpkg lock")
    text = out.getvalue()
    assert "node2\x1b[0m: plan failed: planning failed: boom\n" in text  # in red, as before
    assert "waiting for the dpkg lock" in text
    assert "1/2" in text or "2/2" in text  # the bar, drawn under the printed lines
    assert ANSI.search(text)  # styled, and the live display's cursor moves
    assert "node1 done" not in text and "operations done" not in text and "[0:" not in text


def test_a_piped_cli_run_logs_its_phases(tmp_path):
    """The real CLI with stderr to a pipe, as under cron or `| tee`, on a host that refuses."""
    path = tmp_path / "inv.yaml"
    path.write_text("cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\nhosts:\n  a: {address: 127.0.0.1}\n")
    proc = rdmaprov("check", str(path), "--json", "--skip-verify", timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert re.search(r"^\[0:00:\d\d\] connect: 1 host$", proc.stderr, re.M), proc.stderr
    assert re.search(r"^\[0:00:\d\d\] connect: a failed \(1/1\): Could not connect", proc.stderr, re.M), proc.stderr
    assert not ANSI.search(proc.stderr)
