"""One shared SSH connection per lab node (OpenSSH's ControlMaster), for `lab ssh`.

Under TCG emulation a fresh login costs a lab VM about 1.5 s of its CPU (sshd starting again,
PAM, the key exchange) and 2 s or more of wall time; a command over a connection already open
costs it about 0.2 s. The lab's own tests run hundreds of `lab ssh` commands, and so does a
user's loop over the nodes. The connection stays open SHARE_S seconds after its last command,
long enough to span a short apply between two commands. A node that reboots ends it (its sshd
closes its sessions as it stops); `lab restart` and `lab down` close it before they stop a node.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SHARE_S = 30
# ssh binds the socket under a name 17 bytes longer, then renames it; a Unix socket's path holds
# at most 107 bytes
MAX_SOCKET_PATH = 90


def share_options(socket: Path) -> list[str]:
    """ssh options that open the node's shared connection, or use it when it is open."""
    if len(str(socket)) > MAX_SOCKET_PATH:
        return []  # a lab folder too deep for a socket's path: each command logs in on its own
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={socket}", "-o", f"ControlPersist={SHARE_S}"]


def end_shared(socket: Path, address: str) -> None:
    """Close the node's shared connection if one is open: a node stopped (`lab down`, `lab
    restart`) leaves no ssh process of the lab behind, and a node booted again gets a new login."""
    if not socket.exists():
        return
    subprocess.run(
        ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", f"root@{address}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    socket.unlink(missing_ok=True)  # a master killed outright leaves its socket
