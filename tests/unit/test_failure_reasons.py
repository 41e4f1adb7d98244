"""The reason a failed host shows: the line that says why, from real apt/dpkg outputs with the
noise around them; how the connection ended when that, not the command, ended it; and the dpkg
recovery loop, run for real against dpkg with a private admin directory."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rdmaprov.engine.connection import CommandEnd, explain, parse_uptime, relay_notes
from rdmaprov.operations.packages import DPKG_RECOVER, RETRY_LOCKED
from rdmaprov.parsers.failure import failure_reason, is_noise
from tests.conftest import FIXTURES

CAPTURED = FIXTURES / "failures"
NOISE = [
    "WARNING: apt does not have a stable CLI interface. Use with caution in scripts.",
    "debconf: delaying package configuration, since apt-utils is not installed",
    "perl: warning: Setting locale failed.",
    "perl: warning: Please check that your locale settings:",
    "\tLANGUAGE = (unset),",
    '\tLC_ALL = "en_US.UTF-8",',
    "    are supported and installed on your system.",
    "locale: Cannot set LC_ALL to default locale: No such file or directory",
]


def _fake_sleep(tmp_path) -> tuple[str, Path]:
    """A shell `sleep` that writes down the seconds it was asked for and waits 50 ms instead: the
    retry loop's waits are asserted, not sat through (a function beats the sleep command in sh)."""
    asked = tmp_path / "slept"
    return f'sleep() {{ echo "$1" >> {asked}; command sleep 0.05; }}', asked


def _release_once_waited(lock: int, asked: Path) -> None:
    """Close the descriptor holding a lock (which releases it) once the retry loop has waited
    once: released after a fixed 0.3 s, the lock was sometimes free before the command first
    looked, on a machine busy enough to start it late."""

    def release() -> None:
        deadline = time.monotonic() + 30
        while not asked.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.close(lock)

    threading.Thread(target=release, daemon=True).start()


def _waits(asked: Path) -> list[str]:
    return asked.read_text().split() if asked.exists() else []


def _lines(name: str) -> list[str]:
    return (CAPTURED / name).read_text().splitlines()


def test_apt_error_line_is_the_reason_not_the_warnings_around_it():
    lines = NOISE[:2] + _lines("apt-unable-to-locate.txt") + NOISE[1:2]
    assert failure_reason(lines) == "E: Unable to locate package no-such-package-rdmaprov"


def test_a_full_disk_is_named_as_such_with_dpkgs_words():
    lines = NOISE + _lines("dpkg-no-space.txt") + ["E: Sub-process /usr/bin/dpkg returned an error code (1)"]
    reason = failure_reason(lines)
    assert reason.startswith("disk full: cannot copy extracted data for './usr/include/infiniband/verbs.h'")
    assert reason.endswith("failed to write (No space left on device)")


def test_dpkg_error_block_beats_apts_generic_sub_process_line():
    lines = [
        "dpkg: error processing package rdma-core (--configure):",
        " installed rdma-core package post-installation script subprocess returned error exit status 1",
        "Errors were encountered while processing:",
        " rdma-core",
        "E: Sub-process /usr/bin/dpkg returned an error code (1)",
    ]
    assert failure_reason(lines) == (
        "dpkg: error processing package rdma-core (--configure): installed rdma-core package post-installation "
        "script subprocess returned error exit status 1"
    )


def test_rdmaprovs_own_message_beats_the_tool_lines_before_it():
    lines = [
        "greet-1.1-c83aea4f584e.tar.gz: FAILED",
        "sha256sum: WARNING: 1 computed checksum did NOT match",
        "rdmaprov: greet-1.1-c83aea4f584e.tar.gz does not match its sha256 on node3: rerun the apply",
    ]
    assert failure_reason(lines) == lines[2]


def test_dpkg_lock_error_and_plain_output():
    assert failure_reason(_lines("dpkg-locked.txt")).startswith("dpkg: error: dpkg frontend lock was locked by")
    assert failure_reason(["building", "make: *** [all] Error 2", "cleaning up"]) == "make: *** [all] Error 2"
    assert failure_reason(["only this"]) == "only this"
    assert failure_reason(NOISE) == "" and failure_reason([]) == ""


def test_noise_is_recognised_and_real_errors_are_not():
    assert all(is_noise(line) for line in NOISE)
    assert not any(is_noise(line) for line in _lines("apt-unable-to-locate.txt") if line.startswith("E:"))


def test_the_reason_is_one_bounded_line():
    reason = failure_reason(["E: " + "x" * 1000])
    assert len(reason) == 300 and reason.endswith("…") and "\n" not in reason


@pytest.mark.parametrize(
    ("end", "output", "expected"),
    [
        (CommandEnd(100), ["E: Unable to locate package x"], "E: Unable to locate package x (exit status 100)"),
        (CommandEnd(None, "connection lost"), ["debconf: delaying package configuration"], "connection lost"),
        (
            CommandEnd(None, "timed out after 10 s (ssh.command_timeout)"),
            ["Unpacking rdma-core (44.0-2) ..."],
            "timed out after 10 s (ssh.command_timeout); its last words: Unpacking rdma-core (44.0-2) ...",
        ),
        (CommandEnd(2), [], "exit status 2"),
        (None, ["E: Unable to locate package x"], "E: Unable to locate package x"),
        (None, [], ""),
    ],
)
def test_explain_puts_how_the_command_ended_first(end, output, expected):
    assert explain(end, output) == expected


def test_uptime_parsing():
    assert parse_uptime("354.12 700.30\n") == 354.12
    assert parse_uptime("") is None and parse_uptime("garbage") is None


def _private_dpkg(tmp_path) -> dict[str, str]:
    admin = tmp_path / "var" / "lib" / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").touch()
    # DPKG_FORCE=not-root: the unit tests run without root (README); dpkg then works on this tree alone.
    return dict(os.environ, DPKG_ROOT=str(tmp_path), DPKG_ADMINDIR=str(admin), DPKG_FORCE="not-root")


def test_dpkg_recovery_waits_while_the_lock_is_held_and_says_so(tmp_path):
    env = _private_dpkg(tmp_path)
    lock = os.open(tmp_path / "var/lib/dpkg/lock-frontend", os.O_RDWR | os.O_CREAT)
    fcntl.lockf(lock, fcntl.LOCK_EX)
    sleep, asked = _fake_sleep(tmp_path)
    _release_once_waited(lock, asked)
    proc = subprocess.run(["sh", "-c", f"{sleep}; {DPKG_RECOVER}"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (
        "rdmaprov note: waiting for the dpkg lock (1/60, 5 s each): dpkg: error: dpkg frontend lock was locked by"
        in proc.stderr
    )
    waits = _waits(asked)
    assert waits and set(waits) == {"5"}, waits  # it waited 5 s a try until the lock was free


def test_an_apt_update_still_holding_the_package_lists_is_waited_for_and_named(tmp_path):
    """A killed apply leaves its `apt-get update` running on the node (or apt-daily runs one):
    the next update meets the lists' lock, which DPkg::Lock::Timeout does not cover. Real
    apt-get, on package lists of this test's own."""
    lists = tmp_path / "lists"
    (lists / "partial").mkdir(parents=True)
    (tmp_path / "parts").mkdir()
    (tmp_path / "sources.list").touch()
    own = f"-o Dir::State::Lists={lists} -o Dir::Etc::SourceList={tmp_path}/sources.list "
    own += f"-o Dir::Etc::SourceParts={tmp_path}/parts"
    lock = os.open(lists / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.lockf(lock, fcntl.LOCK_EX)
    sleep, asked = _fake_sleep(tmp_path)
    _release_once_waited(lock, asked)
    script = f"{sleep}; {RETRY_LOCKED}; retry_locked 'package lists' apt-get {own} update -q || exit 1; echo updated"
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "updated", proc.stderr
    assert "rdmaprov note: waiting for the package lists lock (1/60, 5 s each): E: Could not get lock " in proc.stderr
    waits = _waits(asked)
    assert waits and set(waits) == {"5"}, waits


def test_debian_13s_wording_of_a_held_dpkg_lock_is_waited_for_too(tmp_path):
    """dpkg 1.22 names the holder instead of "another process". The line is the real one; the
    command that prints it once (then succeeds) stands where dpkg --configure -a runs."""
    said = (FIXTURES / "lab" / "dpkg_configure_lock_held_debian13.txt").read_text().strip()
    once = tmp_path / "once"
    locked = f'if [ -e {once} ]; then exit 0; fi; touch {once}; echo "{said}" >&2; exit 2'
    sleep, asked = _fake_sleep(tmp_path)
    proc = subprocess.run(
        ["sh", "-c", f"{sleep}; {RETRY_LOCKED}; retry_locked dpkg sh -c '{locked}' || exit 1; echo recovered"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "recovered", proc.stderr
    assert proc.stderr.strip() == f"rdmaprov note: waiting for the dpkg lock (1/60, 5 s each): {said}"
    assert _waits(asked) == ["5"]


def test_dpkg_recovery_fails_at_once_on_any_other_error(tmp_path):
    env = _private_dpkg(tmp_path)
    (tmp_path / "var/lib/dpkg/status").write_text("this is not a dpkg status file\n")
    started = time.monotonic()
    proc = subprocess.run(
        ["sh", "-c", DPKG_RECOVER + "; echo installed anyway"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "installed anyway" not in proc.stdout
    assert "dpkg: error" in proc.stderr and "waiting" not in proc.stderr
    assert time.monotonic() - started < 4  # no 5 s retry


def test_notes_are_passed_on_as_they_arrive_and_every_line_still_reaches_pyinfra():
    seen: list[str] = []
    lines = [
        "debconf: delaying package configuration\n",
        b"rdmaprov note: waiting for the dpkg lock (1/60)\n",
        "E: x\n",
    ]
    relayed = relay_notes(iter(lines), seen.append)
    assert next(relayed) == lines[0] and seen == []
    assert next(relayed) == lines[1] and seen == ["waiting for the dpkg lock (1/60)"]  # before the rest is read
    assert list(relayed) == ["E: x\n"] and seen == ["waiting for the dpkg lock (1/60)"]
