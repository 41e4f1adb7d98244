"""libvirt for the Vagrant end-to-end test: the system daemon started when it is not running
(CI machines have no systemd to start it), and what a test left in it, by name prefix."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

URI = "qemu:///system"


def virsh(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=120, check=check)


def _pid(pidfile: str) -> int | None:
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Libvirtd:
    """libvirtd (and virtlogd, which keeps its QEMUs' logs) as daemons when none answers; `stop`
    ends only the ones started here, by PID."""

    DAEMONS = (("virtlogd", "/run/virtlogd.pid"), ("libvirtd", "/run/libvirtd.pid"))

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    def start(self) -> Libvirtd:
        if virsh("version").returncode == 0:
            return self
        for daemon, pidfile in self.DAEMONS:
            if subprocess.run(["pgrep", "-x", daemon], capture_output=True).returncode == 0:
                continue
            subprocess.run([daemon, "-d"], check=True, timeout=60)
            deadline = time.monotonic() + 30
            while _pid(pidfile) is None and time.monotonic() < deadline:
                time.sleep(0.5)
            pid = _pid(pidfile)
            assert pid, f"{daemon} -d wrote no {pidfile}"
            self.started.append((daemon, pid))
        deadline = time.monotonic() + 60
        while virsh("version").returncode != 0:
            assert time.monotonic() < deadline, virsh("version").stderr
            time.sleep(1)
        return self

    def stop(self) -> None:
        for daemon, pid in reversed(self.started):
            try:
                if daemon in Path(f"/proc/{pid}/cmdline").read_text():
                    os.kill(pid, signal.SIGTERM)
            except OSError:
                continue
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.5)


def names(kind: str, prefix: str, pool: str | None = None) -> list[str]:
    """Domains, networks or a pool's volumes whose names start with `prefix`."""
    args = {"domain": ["list", "--all", "--name"], "network": ["net-list", "--all", "--name"]}.get(kind)
    if kind == "volume":
        assert pool
        args = ["vol-list", pool]
        lines = [line.split()[0] for line in virsh(*args).stdout.splitlines()[2:] if line.strip()]
    else:
        assert args
        lines = [line.strip() for line in virsh(*args).stdout.splitlines() if line.strip()]
    return [name for name in lines if name.startswith(prefix)]


def processes(*markers: str) -> list[str]:
    """Processes whose command line names one of `markers` (QEMU domains, dnsmasq of a network)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(marker in cmdline for marker in markers):
            found.append(f"{pid}: {cmdline[:160]}")
    return found
