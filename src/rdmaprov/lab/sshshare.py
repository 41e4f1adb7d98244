"""One shared SSH connection per lab node (OpenSSH's ControlMaster), for `lab ssh`.

Under TCG emulation a fresh login costs a lab VM about 1.5 s of its CPU (sshd starting again,
PAM, the key exchange) and 2 s or more of wall time; a command over a connection already open
costs it about 0.2 s. The lab's own tests run hundreds of `lab ssh` commands, and so does a
user's loop over the nodes. The connection stays open SHARE_S seconds after its last command,
long enough to span a short apply between two commands. `lab restart` and `lab down` close it
before they stop a node. A node that goes silent without closing it (a VM stopped or killed from
outside, a kernel panic) no longer answers its keepalives, and it ends within SILENT_S seconds,
so a command run meanwhile fails instead of waiting on a dead connection for TCP's minutes.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

SHARE_S = 30
KEEPALIVE_S, KEEPALIVES = 10, 3
SILENT_S = KEEPALIVE_S * KEEPALIVES
# ssh binds the socket under a name 17 bytes longer, then renames it; a Unix socket's path holds
# at most 107 bytes
MAX_SOCKET_PATH = 90


def share_options(socket: Path) -> list[str]:
    """ssh options that open the node's shared connection, or use it when it is open."""
    if len(str(socket)) > MAX_SOCKET_PATH:
        return []  # a lab folder too deep for a socket's path: each command logs in on its own
    shared = {"ControlMaster": "auto", "ControlPath": socket, "ControlPersist": SHARE_S}
    alive = {"ServerAliveInterval": KEEPALIVE_S, "ServerAliveCountMax": KEEPALIVES}
    return [word for key, value in (shared | alive).items() for word in ("-o", f"{key}={value}")]


def end_shared(socket: Path, address: str) -> None:
    """Close the node's shared connection if one is open: a node stopped (`lab down`, `lab
    restart`) leaves no ssh process of the lab behind, and a node booted again gets a new login."""
    if not socket.exists():
        return
    # stopping the node goes on if ssh cannot be asked: an ssh still holding the connection then
    # ends within SILENT_S of the node's end
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", f"root@{address}"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
    socket.unlink(missing_ok=True)  # a master killed outright leaves its socket
