"""`promtool check metrics` on metrics text: Prometheus' own linter (base units, `_total` on
counters, HELP on every family), taken from Debian's `prometheus` package by tools/setup.sh."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def promtool_check(text: str) -> tuple[int, str]:
    """promtool's exit code and what it said about `text` ((0, "") when clean); skips the test where
    promtool is not installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (tools/setup.sh puts it in /usr/local/bin as root)")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, (done.stdout + done.stderr).strip()
