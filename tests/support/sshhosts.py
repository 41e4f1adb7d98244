"""Real SSH hosts for tests: each its own network namespace, mount namespace (an overlay of this
machine's root, so writes stay private to the host), UTS name and sshd, on a private bridge.

Everything created is named with a per-run prefix and removed by name and by PID on teardown.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.netbands import octets

_START = """set -e
D="$1"
[ "$3" = disk ] || mount -t tmpfs tmpfs "$D/mnt"  # disk: what hosts write stays in $D/mnt on disk
mkdir -p "$D/mnt/upper" "$D/mnt/work" "$D/mnt/root"
mount -t overlay overlay -o lowerdir=/,upperdir="$D/mnt/upper",workdir="$D/mnt/work" "$D/mnt/root"
R="$D/mnt/root"
mount --rbind /dev "$R/dev"
mount -t proc proc "$R/proc"
# A twin host (tests/support/twin.py) has a /sys of its own, composed from captured outputs.
if [ -d "$D/twin/sys" ]; then mount -t tmpfs tmpfs "$R/sys"; cp -a "$D/twin/sys/." "$R/sys/"
else mount -t sysfs sysfs "$R/sys"; fi
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
mkdir -p "$R/run/sshd" "$R/etc/rdmaprov-test"
cp "$D/hostkey" "$D/authorized_keys" "$D/sshd_config" "$R/etc/rdmaprov-test/"
# The host's own identity where a real node keeps it (rdmaprov reads host keys there).
rm -f "$R"/etc/ssh/ssh_host_*
cp "$D/hostkey" "$R/etc/ssh/ssh_host_ed25519_key"
ssh-keygen -y -f "$D/hostkey" > "$R/etc/ssh/ssh_host_ed25519_key.pub"
rm -rf "$R/root/.ssh"
# root's shell start-up as a stock node has it, not this machine's (pyenv init there ran ~100
# processes for every command, ten times what the command itself cost)
rm -f "$R/root/.bashrc" "$R/root/.profile" "$R/root/.bash_profile" "$R/root/.bash_login"
[ -f /usr/share/base-files/dot.bashrc ] && cp /usr/share/base-files/dot.bashrc "$R/root/.bashrc"
[ -f /usr/share/base-files/dot.profile ] && cp /usr/share/base-files/dot.profile "$R/root/.profile"
[ -d "$D/twin/root" ] && cp -a "$D/twin/root/." "$R/"
hostname "$2"
exec chroot "$R" /usr/sbin/sshd -D -e -f /etc/rdmaprov-test/sshd_config
"""

_SSHD_CONFIG = """Port 22
ListenAddress {address}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
AuthorizedKeysFile /etc/rdmaprov-test/authorized_keys .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile /run/sshd.pid
Subsystem sftp internal-sftp
"""


_FARMS = itertools.count()


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@dataclass
class SSHHost:
    name: str
    address: str
    netns: str
    workdir: Path
    pid: int | None = None


_NEIGHBOURS = Path("/proc/sys/net/ipv4/neigh/default")
# A Linux bridge takes at most 1,024 ports (BR_MAX_PORTS): a 2,000-host farm stopped at its
# 1,024th host. Past this many, hosts go on further bridges joined to the first by a veth pair.
_HOSTS_PER_BRIDGE = 1000


def _hold_neighbours(hosts: int) -> dict[Path, str]:
    """Room in this machine's ARP table for every host: by default the kernel collects entries
    past 512 and refuses past 1,024 ("neighbor table overflow"), and a farm of hundreds then
    loses packets: a 1,000-host apply lost half its hosts to connect timeouts and stalled
    sessions. Raised only where too low for this farm; the old values, to put back."""
    wanted = {"gc_thresh1": hosts + 64, "gc_thresh2": 2 * hosts + 128, "gc_thresh3": 4 * hosts + 256}
    saved: dict[Path, str] = {}
    for name, value in wanted.items():
        path = _NEIGHBOURS / name
        old = path.read_text()
        if int(old) < value:
            saved[path] = old
            path.write_text(str(value))
    return saved


@dataclass
class SSHHostFarm:
    """N sshd hosts; `client_key` logs into all of them, `known_hosts` pins their host keys."""

    count: int
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rdmaprov-hosts-")))
    hosts: list[SSHHost] = field(default_factory=list)
    # What each host writes goes to memory (tmpfs), or with disk=True to files under `root`:
    # for benchmarks that ship hundreds of MB to each of dozens of hosts.
    disk: bool = False
    # Called with each host before its sshd starts: lays out what its root gets (a twin's files).
    prepare: Callable[[SSHHost], None] | None = None
    # The kernel's ARP thresholds this farm raised, with the values to put back when it stops.
    saved_neighbours: dict[Path, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        tag = f"{os.getpid() % 10000:04d}{next(_FARMS)}"  # a process may run several farms
        self.prefix = f"rpt{tag}"
        self.bridge = f"{self.prefix}br"
        self.network = self._free_network()
        self.client_key = self.root / "client"
        self._procs: dict[str, subprocess.Popen] = {}
        self.known_hosts = self.root / "known_hosts"

    def _free_network(self) -> ipaddress.IPv4Network:
        """A /24 in 10.231/16 for up to 240 hosts (what the tests use), else a /21 in 10.232/16 for
        up to 2,000 (the scale benchmarks), overlapping no network of this machine."""
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout.split()
        taken = [ipaddress.ip_interface(word).network for word in used if "/" in word and "." in word]
        length, second = (24, 231) if self.count <= 240 else (21, 232)
        if self.count > 2000:
            raise ValueError("at most 2,000 test hosts")
        step = 1 << (24 - length)
        for third in octets(0, 256):
            candidate = ipaddress.ip_network(f"10.{second}.{third - third % step}.0/{length}")
            if not any(candidate.overlaps(net) for net in taken):
                return candidate
        raise RuntimeError(f"no free 10.{second}.x.0/{length} network for test hosts")

    def address_of(self, index: int) -> str:
        return str(self.network.network_address + 10 + index)

    def start(self) -> SSHHostFarm:
        """Create and start every host; on a failure, what was made is removed before it raises."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> SSHHostFarm:
        self.saved_neighbours = _hold_neighbours(self.count)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        self._add_bridges()
        # The first host alone (`ip netns add` mounts /run/netns on first use), then the rest by
        # as many workers as cores: each host is a dozen commands, and 2,000 one after another
        # took 3½ minutes on 16 cores.
        self.hosts.append(self._made(1))
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            self.hosts += pool.map(self._made, range(2, self.count + 1))
        lines = []
        for host in self.hosts:
            pub = (host.workdir / "hostkey.pub").read_text().split()
            lines.append(f"{host.address} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        for host in self.hosts:  # all started first, then each waited for: hundreds start in seconds
            self._launch_sshd(host)
        for host in self.hosts:
            self._wait_sshd(host)
        return self

    def _made(self, index: int) -> SSHHost:
        host = self._create(index)
        if self.prepare is not None:
            self.prepare(host)
        return host

    def _create(self, index: int) -> SSHHost:
        name = f"node{index}"
        netns = f"{self.prefix}n{index}"
        workdir = self.root / name
        (workdir / "mnt").mkdir(parents=True)
        address = self.address_of(index)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(workdir / "hostkey"))
        shutil.copy(f"{self.client_key}.pub", workdir / "authorized_keys")
        (workdir / "sshd_config").write_text(_SSHD_CONFIG.format(address=address))
        (workdir / "start.sh").write_text(_START)
        veth = f"{self.prefix}v{index}"
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _run("ip", "link", "set", veth, "master", self._bridge_for(index), "up")
        _run("ip", "-n", netns, "addr", "add", f"{address}/{self.network.prefixlen}", "dev", "eth0")
        _run("ip", "-n", netns, "link", "set", "eth0", "up")
        _run("ip", "-n", netns, "link", "set", "lo", "up")
        return SSHHost(name=name, address=address, netns=netns, workdir=workdir)

    def _add_bridges(self) -> None:
        """The first bridge (the hosts' gateway address on it) and, past _HOSTS_PER_BRIDGE hosts,
        further ones joined to it by a veth pair: one layer 2 segment."""
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.network.network_address + 1}/{self.network.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for extra in range(1, (self.count - 1) // _HOSTS_PER_BRIDGE + 1):
            bridge, joint, peer = f"{self.bridge}{extra}", f"{self.prefix}j{extra}", f"{self.prefix}k{extra}"
            _run("ip", "link", "add", bridge, "type", "bridge")
            _run("ip", "link", "set", bridge, "up")
            _run("ip", "link", "add", joint, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", joint, "master", self.bridge, "up")
            _run("ip", "link", "set", peer, "master", bridge, "up")

    def _bridge_for(self, index: int) -> str:
        extra = (index - 1) // _HOSTS_PER_BRIDGE
        return f"{self.bridge}{extra}" if extra else self.bridge

    def start_sshd(self, host: SSHHost) -> None:
        self._launch_sshd(host)
        self._wait_sshd(host)

    def _launch_sshd(self, host: SSHHost) -> None:
        log = open(host.workdir / "sshd.log", "ab")
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.netns,
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                str(host.workdir / "start.sh"),
                str(host.workdir),
                host.name,
                "disk" if self.disk else "memory",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        host.pid = proc.pid
        self._procs[host.name] = proc

    def _wait_sshd(self, host: SSHHost) -> None:
        proc = self._procs[host.name]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if b"Server listening" in (host.workdir / "sshd.log").read_bytes():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd for {host.name} did not start: {(host.workdir / 'sshd.log').read_text()}")

    def stop_sshd(self, host: SSHHost) -> None:
        proc = self._procs.pop(host.name, None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        host.pid = None

    def ssh(self, host: SSHHost, command: str) -> subprocess.CompletedProcess:
        """Run a command on a host as a person would, with the pinned host key."""
        return subprocess.run(self._ssh_argv(host, command), capture_output=True, text=True, timeout=30)

    def send(self, host: SSHHost, command: str, data: bytes) -> subprocess.CompletedProcess:
        """Run a command on a host with `data` on its standard input (a tar to unpack there)."""
        return subprocess.run(self._ssh_argv(host, command), input=data, capture_output=True, timeout=30)

    def _ssh_argv(self, host: SSHHost, command: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.client_key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"root@{host.address}",
            command,
        ]

    def inventory(self, path: Path, extra: str = "", hosts: list[SSHHost] | None = None, timeout: int = 5) -> Path:
        """Write an inventory for these hosts (or some of them); `extra` is appended YAML
        (defaults:, etc.); `timeout` is ssh.connect_timeout."""
        lines = [
            "cluster:",
            "  name: testfarm",
            "  ssh:",
            "    user: root",
            f"    key: {self.client_key}",
            f"    known_hosts: {self.known_hosts}",
            f"    connect_timeout: {timeout}",
            "groups:",
            "  nodes:",
            "    hosts:",
        ]
        for host in self.hosts if hosts is None else hosts:
            lines += [f"      {host.name}:", f"        address: {host.address}"]
        path.write_text("\n".join(lines) + "\n" + extra)
        return path

    def _remove(self, index: int) -> None:
        # The host's sessions first: a client killed mid-run (Ctrl-C on a bench) closes nothing
        # once the veth is gone, so its sessions would wait on TCP for hours, holding the mounts.
        namespace = f"{self.prefix}n{index}"
        sessions = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
        for pid in sessions.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{self.prefix}v{index}"], capture_output=True)

    def stop(self) -> None:
        for host in self.hosts:
            self.stop_sshd(host)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            # by name: a start that failed half-way made some
            list(pool.map(self._remove, range(1, self.count + 1)))
        for extra in range((self.count - 1) // _HOSTS_PER_BRIDGE, 0, -1):
            subprocess.run(["ip", "link", "del", f"{self.prefix}j{extra}"], capture_output=True)
            subprocess.run(["ip", "link", "del", f"{self.bridge}{extra}"], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        for path, value in self.saved_neighbours.items():
            path.write_text(value)
        self.saved_neighbours = {}
