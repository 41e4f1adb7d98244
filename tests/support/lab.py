"""Boot a private lab for a test session (own state dir, bridge and subnet), and prove teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import rdmaprov
from tests.support.netbands import octets


def free_subnet(skip: int = 0) -> str:
    """A /24 no interface here uses; `skip` free ones are passed over (a test needing two)."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for third in octets(100, 250):
        if f" 10.78.{third}." not in used:
            if skip == 0:
                return f"10.78.{third}.0/24"
            skip -= 1
    raise RuntimeError("no free subnet for the test lab")


# The shared VM lab's nodes: node1 and node2 (the cluster) Debian 12, node3 Debian 13.
VM_LAB_RELEASES = "bookworm,bookworm,trixie"


class TestLab:
    """A lab started through the real CLI in its own directory."""

    def __init__(
        self, root: Path, kind: str, nodes: int, tag: str, members: int | None = None, release: str = "bookworm"
    ) -> None:
        self.dir = root / f"lab-{kind}"
        self.kind = kind
        self.nodes = nodes
        self.release = release
        self.members = members or nodes
        self.bridge = f"rdt{os.getpid() % 10000}{tag}"
        self.subnet = free_subnet()

    def up(self) -> TestLab:
        proc = rdmaprov(
            "lab",
            "--dir",
            str(self.dir),
            "up",
            "--nodes",
            str(self.nodes),
            "--kind",
            self.kind,
            "--release",
            self.release,
            "--subnet",
            self.subnet,
            "--bridge",
            self.bridge,
            "--memory",
            "768",
            timeout=1500,
        )
        if proc.returncode != 0:
            self.down()
            raise RuntimeError(f"lab up failed:\n{proc.stdout}\n{proc.stderr}")
        self.up_output = proc.stdout
        (self.dir / "up-output.txt").write_text(proc.stdout)
        return self

    @classmethod
    def attach(cls, directory: Path, kind: str, nodes: int, members: int) -> TestLab:
        """A lab that is already up (booted by `up` in another process, see conftest's
        RDMAPROV_TEST_LAB): the tests use it, and leave it up for the next run."""
        lab = cls(directory.parent, kind, nodes, "a", members)
        lab.dir = directory
        lab.up_output = (directory / "up-output.txt").read_text()
        state = json.loads((directory / "state.json").read_text())
        lab.bridge, lab.subnet = state["bridge"], state["subnet"]
        return lab

    @property
    def full_inventory(self) -> str:
        """Every node the lab booted."""
        return str(self.dir / "inventory.yaml")

    @property
    def inventory(self) -> str:
        """The cluster the tests converge: the first `members` nodes (the rest wait to be bootstrapped)."""
        path = self.dir / f"inventory-{self.members}.yaml"
        # made from the full inventory each time: a lab booted again in the same folder (a kept
        # lab) has another subnet, and a copy from before would point at the old one
        text = Path(self.full_inventory).read_text()
        head, _, hosts = text.partition("    hosts:\n")
        entries = hosts.split("      node")[1:]
        members = head + "    hosts:\n" + "".join("      node" + e for e in entries[: self.members])
        if not path.exists() or path.read_text() != members:
            path.write_text(members)
        return str(path)

    def ssh(self, node: str, command: str, timeout: int = 120) -> subprocess.CompletedProcess:
        return rdmaprov("lab", "--dir", str(self.dir), "ssh", node, "--", command, timeout=timeout)

    def ssh_each(self, nodes: list[str], command: str, timeout: int = 120) -> dict[str, subprocess.CompletedProcess]:
        """`command` on every node at once: each VM is one emulated CPU, so a step that keeps a VM
        busy takes as long on two nodes as on one, where one after the other left a core idle."""
        with ThreadPoolExecutor(len(nodes)) as pool:
            done = {node: pool.submit(self.ssh, node, command, timeout) for node in nodes}
        return {node: future.result() for node, future in done.items()}

    @contextmanager
    def frozen(self, node: str) -> Iterator[None]:
        """`node`'s VM stopped where it stands (SIGSTOP to the QEMU this lab started, by its PID):
        to its peers it stops answering without a reset, as a node that lost power does.
        Afterwards SIGCONT lets it run on (its old connections timed out), so the tests after
        this one still have the node, unless the test booted it again meanwhile."""
        status = rdmaprov("lab", "--dir", str(self.dir), "status", "--json", timeout=60)
        [pid] = [entry["pid"] for entry in json.loads(status.stdout) if entry["name"] == node]
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                cmdline = ""  # powered off meanwhile by `lab restart`
            if str(self.dir) in cmdline:
                os.kill(pid, signal.SIGCONT)

    def restart_hung(self) -> list[str]:
        """Get any VM of the lab that runs but stopped answering SSH going again through `lab
        restart` (a QEMU NIC that stopped taking transmits, seen in CI), naming it, what its kernel
        and QEMU said and what was done, so that one emulation fault costs one test at most, not
        every test after it."""
        status = json.loads(rdmaprov("lab", "--dir", str(self.dir), "status", "--json", timeout=60).stdout)
        hung = [row for row in status if row["kind"] == "vm" and row["running"] and not row["ssh"]]
        if hung:
            names = [row["name"] for row in hung]
            restarted = rdmaprov("lab", "--dir", str(self.dir), "restart", *names, timeout=900)
            assert restarted.returncode == 0, restarted.stderr
            said = "; ".join(f"{row['name']} ({row['kernel'] or 'console silent'}; {row['nic']})" for row in hung)
            warnings.warn(f"lab VM not answering SSH: {said}; {restarted.stdout.strip()}", stacklevel=2)
        return [row["name"] for row in hung]

    def down(self) -> subprocess.CompletedProcess:
        """The lab down, with whatever its nic-watch did said as a warning (how often QEMU's
        transmit stall struck this run, in CI's log)."""
        watched = self.dir / "nic-watch.log"
        if watched.exists() and watched.read_text().strip():
            warnings.warn(f"lab nic-watch in {self.dir}:\n{watched.read_text()}", stacklevel=2)
        return rdmaprov("lab", "--dir", str(self.dir), "down", timeout=300)

    def leftovers(self) -> list[str]:
        """Anything of this lab still on the machine: processes, links, namespaces."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(self.dir) in cmdline:
                found.append(f"process {pid}: {cmdline[:120]}")
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if self.bridge in line]
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        found += [f"netns {line}" for line in netns.splitlines() if self.bridge in line]
        return found
