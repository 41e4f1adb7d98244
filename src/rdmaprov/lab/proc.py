"""Running the host-side tools the lab needs, with errors that say what to install."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from rdmaprov.errors import UserError

# tool -> Debian package that provides it
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "mke2fs": "e2fsprogs",
    "systemd-nspawn": "systemd-container",
    "apt-ftparchive": "apt-utils",
    "gpg": "gnupg",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "grub-mkimage": "grub-pc-bin",
    "vagrant": "vagrant vagrant-libvirt",
    "xz": "xz-utils",
}


def require(*tools: str) -> None:
    """Fail early, naming the packages to install, if a host tool is missing."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        packages = sorted({TOOLS.get(t, t) for t in missing})
        raise UserError(
            f"the lab needs {', '.join(missing)}: install with `apt-get install {' '.join(packages)}` (or run "
            "tools/setup.sh)"
        )


def run(cmd: Sequence[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure raise a UserError with its last lines of output."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise UserError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:4])} ...\n{tail}")
    return proc
