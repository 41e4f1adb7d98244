"""Commit subjects of at most 72 characters, the detail in the body: the hook every clone can
enable refuses others, and the history since the rule was adopted keeps to it (CI runs this on
its clone, so a long subject cannot land)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO

HOOK = REPO / ".githooks" / "commit-msg"
# The last commit before the rule (its subject, like many before it, runs to hundreds of characters).
ADOPTED_AFTER = "9c5eced"


def _hook(tmp_path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(["sh", str(HOOK), str(path)], capture_output=True, text=True, check=False)


def test_the_hook_takes_a_short_subject_and_refuses_a_long_one_or_a_missing_blank_line(tmp_path):
    assert _hook(tmp_path, "exporter: bytes where sysfs counts words\n\nWhy, at length.\n").returncode == 0
    assert _hook(tmp_path, "x" * 72 + "\n# a comment git strips\n").returncode == 0
    assert _hook(tmp_path, "é" * 72 + "\n").returncode == 0  # characters, not bytes
    long = _hook(tmp_path, "x" * 73 + "\n")
    assert long.returncode == 1 and "the subject is 73 characters, at most 72" in long.stderr
    run_on = _hook(tmp_path, "a subject\nthat runs on\n")
    assert run_on.returncode == 1 and "leave a blank line after the subject" in run_on.stderr


def test_every_subject_since_the_rule_is_at_most_72_characters():
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no history to read")
    known = subprocess.run([git, "cat-file", "-e", ADOPTED_AFTER], cwd=REPO, capture_output=True, check=False)
    if known.returncode != 0:
        pytest.skip(f"a shallow clone: {ADOPTED_AFTER} is not in its history")
    subjects = subprocess.run(
        [git, "log", "--format=%s", f"{ADOPTED_AFTER}..HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [s for s in subjects if len(s) > 72] == []
