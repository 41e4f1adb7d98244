"""Starting and stopping lab nodes: QEMU TCG VMs on taps, or systemd-nspawn containers on the bridge."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rdmaprov.lab.image import Image
from rdmaprov.lab.network import create_tap, delete_link
from rdmaprov.lab.proc import run
from rdmaprov.lab.releases import DEFAULT_RELEASE
from rdmaprov.lab.sshshare import end_shared


@dataclass
class Node:
    """One lab node as recorded in the lab's state file."""

    name: str
    address: str
    prefixlen: int
    kind: str
    workdir: str
    pid: int | None = None
    link: str | None = None  # the tap (VM) or the nspawn machine name (container)
    release: str = DEFAULT_RELEASE.codename  # the node's release by its name (releases.Release.name)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def console(self) -> Path:
        return Path(self.workdir) / "console.log"

    @property
    def qmp(self) -> Path:
        """A VM's QEMU machine protocol socket: how the lab asks QEMU about a VM whose network
        stopped answering, and gets its transmits going again (lab/qmp.py)."""
        return Path(self.workdir) / "qmp.sock"

    @property
    def ssh_socket(self) -> Path:
        """Where `lab ssh` keeps its shared connection to the node (lab/sshshare.py says why)."""
        return Path(self.workdir) / "ssh.sock"

    @property
    def qemu_args(self) -> Path:
        """The command line a VM was booted with, to boot it again the same way."""
        return Path(self.workdir) / "qemu.args"

    @property
    def report(self) -> Path:
        """Where the node's first-boot setup printed its host keys."""
        return self.console if self.kind == "vm" else Path(self.workdir) / "out" / "hostkeys"


def _node_config(node: Node, authorized_key: str) -> dict[str, str]:
    return {
        "hostname": node.name,
        "ip": f"{node.address}/{node.prefixlen}",
        "authkey": base64.b64encode(authorized_key.encode()).decode(),
    }


def start_vm(
    node: Node, image: Image, bridge: str, authorized_key: str, memory_mb: int, index: int, disk: Path, set_up: bool
) -> None:
    """Boot a VM from a copy-on-write overlay of `disk`: the image's, set up at boot (name,
    address, the lab's key) by the image's init script, or a saved node's (set_up False), which
    boots as it was saved (see restart_vm)."""
    workdir = Path(node.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    overlay = workdir / "disk.qcow2"
    overlay.unlink(missing_ok=True)
    run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(disk), str(overlay)],
        f"creating {node.name}'s disk",
    )
    tap = node.link or f"{bridge}t{index}"
    create_tap(tap, bridge)
    node.link = tap
    config = " ".join(f"rdmaprov.{k}={v}" for k, v in _node_config(node, authorized_key).items())
    b, c, d = (int(x) for x in node.address.split(".")[1:])
    mac = f"52:54:00:{b:02x}:{c:02x}:{d:02x}"
    cmd = [
        "qemu-system-x86_64",
        "-name",
        f"rdmaprov-{node.name}",
        "-machine",
        "q35",
        "-accel",
        "tcg,thread=multi,tb-size=256",
        "-cpu",
        "max",
        "-smp",
        "1",
        "-m",
        str(memory_mb),
        "-kernel",
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        f"root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet {config}",
        "-drive",
        f"file={overlay},if=virtio,format=qcow2",
        "-netdev",
        f"tap,id=n0,ifname={tap},script=no,downscript=no",
        "-device",
        # event_idx=off: with the event index, QEMU 7.2 under TCG now and then stopped taking a
        # VM's transmits during heavy rxe traffic, as if a notification was lost (docs/lab.md)
        f"virtio-net-pci,netdev=n0,mac={mac},event_idx=off",
        "-serial",
        f"file:{node.console}",
        "-display",
        "none",
        "-monitor",
        "none",
        "-qmp",
        f"unix:{node.qmp},server=on,wait=off",
        "-pidfile",
        str(workdir / "qemu.pid"),
    ]
    node.qemu_args.write_text(json.dumps(cmd))
    _launch_vm(node, cmd if set_up else without_setup(cmd))


def _launch_vm(node: Node, cmd: list[str]) -> None:
    if node.console.exists():  # the boot before keeps its last words (a VM booted again as hung)
        node.console.replace(node.console.with_suffix(".log.1"))
    log = open(Path(node.workdir) / "qemu.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    node.pid = proc.pid


def restart_vm(node: Node, marker: str) -> None:
    """Power a VM off and boot it again on the same disk and tap, with the same QEMU command line
    less the lab's set-up words: the node keeps the name, address and keys its disk has, and the
    SSH trust and /etc/hosts names apply gave it, which the image's init script, set up again,
    would write anew (the lab knows its host keys from its first boot)."""
    end_shared(node.ssh_socket, node.address)
    stop_process(node.pid, marker)
    _launch_vm(node, without_setup(json.loads(node.qemu_args.read_text())))


def without_setup(cmd: list[str]) -> list[str]:
    """A VM's QEMU command line without the kernel arguments the image's init script sets the
    node up from (rdmaprov.*): that script then leaves the node as its disk has it."""
    at = cmd.index("-append") + 1
    kept = " ".join(word for word in cmd[at].split() if not word.startswith("rdmaprov."))
    return [*cmd[:at], kept, *cmd[at + 1 :]]


def start_container(node: Node, image: Image, bridge: str, authorized_key: str, machine: str) -> None:
    """Boot the image's root directory as a container with its own overlay and network namespace."""
    workdir = Path(node.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "out").mkdir(exist_ok=True)
    config = workdir / "config"
    config.write_text("".join(f"{k}={v}\n" for k, v in _node_config(node, authorized_key).items()))
    cmd = [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={machine}",
        f"--directory={image.rootfs}",
        "--volatile=overlay",
        f"--network-bridge={bridge}",
        f"--bind-ro={config}:/etc/rdmaprov-lab/config",
        f"--bind={workdir / 'out'}:/etc/rdmaprov-lab/out",
        "--console=pipe",
        "--capability=CAP_NET_ADMIN",
    ]
    console = open(node.console, "wb")
    proc = subprocess.Popen(
        cmd, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    node.pid = proc.pid
    node.link = machine


def _is_ours(pid: int, marker: str) -> bool:
    """Guard against PID reuse: only signal a process whose command line names this lab."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours still "exists" until reaped
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def stop_process(pid: int | None, marker: str, timeout: float = 20) -> None:
    """SIGTERM, wait, then SIGKILL — only if the PID is still the process we started."""
    if not pid or not _is_ours(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)  # a stopped process (a node frozen on purpose) acts on it now
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def stop_node(node: Node, marker: str) -> None:
    end_shared(node.ssh_socket, node.address)
    stop_process(node.pid, marker)
    if node.kind == "vm" and node.link:
        delete_link(node.link)
    elif node.kind == "container" and node.link:
        delete_link(f"vb-{node.link}")
    node.pid = None
