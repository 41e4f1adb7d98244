"""The libraries' own logs: a node that accepts TCP but never sends its SSH banner makes
paramiko log an error with a traceback. rdmaprov names the node itself, so that log is shown only
with -v, and never by Python's last-resort handler."""

from __future__ import annotations

import subprocess
import sys

# A real paramiko client against a loopback port that never answers: what a node whose sshd is
# frozen (or not yet up) does to every connection.
SILENT_NODE = """
import socket, sys
import paramiko
from rdmaprov.engine.pyinfra_state import quiet_libraries
if sys.argv[1] != "untouched":
    quiet_libraries(verbose=sys.argv[1] == "verbose")
silent = socket.create_server(("127.0.0.1", 0))
client = paramiko.SSHClient()
client.set_missing_host_key_policy(paramiko.RejectPolicy())
try:
    client.connect("127.0.0.1", port=silent.getsockname()[1], banner_timeout=0.5, timeout=5,
                   look_for_keys=False, allow_agent=False)
except paramiko.SSHException as error:
    print(error)
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SILENT_NODE, mode], capture_output=True, text=True, timeout=60, check=True
    )


def test_without_rdmaprov_s_setting_paramiko_prints_a_traceback() -> None:
    """What the setting is for: left alone, the error and its traceback reach stderr."""
    done = _run("untouched")
    assert "Error reading SSH protocol banner" in done.stdout
    assert "Traceback" in done.stderr


def test_the_error_is_kept_off_stderr_without_verbose() -> None:
    done = _run("quiet")
    assert "Error reading SSH protocol banner" in done.stdout  # the caller still gets it
    assert done.stderr == ""


def test_verbose_shows_paramiko_s_error_under_its_name() -> None:
    done = _run("verbose")
    assert "paramiko: Exception (client): Error reading SSH protocol banner" in done.stderr
