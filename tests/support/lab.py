"""Boot a private lab for a test session (own state dir, bridge and subnet), and prove teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from rdmaprov.lab.lab import Lab, find_node, ssh_command
from tests.conftest import rdmaprov
from tests.support.netbands import octets


def _failed(saved: Path) -> Path:
    """Where save_pair says why nothing was saved in `saved`."""
    return saved.with_name(saved.name + ".failed")


def free_subnet(skip: int = 0) -> str:
    """A /24 no interface here uses; `skip` free ones are passed over (a test needing two)."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for third in octets(100, 250):
        if f" 10.78.{third}." not in used:
            if skip == 0:
                return f"10.78.{third}.0/24"
            skip -= 1
    raise RuntimeError("no free subnet for the test lab")


# The shared VM lab's nodes: node1 and node2 (the cluster) Debian 12, node3 Debian 13 on its
# backports kernel (7.3), which moves SoftRoCE devices between network namespaces (test_lab's
# own-namespace containers).
VM_LAB_RELEASES = "bookworm,bookworm,trixie-backports"


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
        return self._boot(
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
        )

    def _boot(self, *args: str) -> TestLab:
        proc = rdmaprov("lab", "--dir", str(self.dir), "up", *args, timeout=1500)
        if proc.returncode != 0:
            self.down()
            raise RuntimeError(f"lab up failed:\n{proc.stdout}\n{proc.stderr}")
        self.up_output = proc.stdout
        (self.dir / "up-output.txt").write_text(proc.stdout)
        return self

    @classmethod
    def copy_of_pair(cls, saved: Path, root: Path, wait_s: float = 3600) -> TestLab:
        """node1 and node2 as the converge test left them, booted from their save (`lab up
        --from`, in this process's network namespace, where their subnet is free) once the lab
        tests' own process has saved them (save_pair), or an error saying why there is none."""
        deadline = time.monotonic() + wait_s
        while not (saved / "saved.json").exists():
            if _failed(saved).exists():
                raise RuntimeError(f"no converged pair to copy: {_failed(saved).read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no converged pair to copy: nothing saved in {saved} within {wait_s:.0f} s")
            time.sleep(5)
        lab = cls(root, "vm", 2, "c")._boot("--from", str(saved))
        state = json.loads((lab.dir / "state.json").read_text())
        lab.bridge, lab.subnet = state["bridge"], state["subnet"]
        return lab

    def save_pair(self, to: Path, converged: bool) -> None:
        """node1 and node2 saved in `to` for copy_of_pair, once the converge test passed; else,
        or if the save fails, a file beside `to` says why (the copy's tests then fail on it)."""
        if not converged:
            _failed(to).write_text(f"the converge test failed on the lab in {self.dir}")
            return
        proc = rdmaprov("lab", "--dir", str(self.dir), "save", "--to", str(to), "node1", "node2", timeout=600)
        if proc.returncode != 0:
            _failed(to).write_text(f"`lab save` failed:\n{proc.stdout}\n{proc.stderr}")

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
        """`command` on a lab node as `rdmaprov lab ssh NODE -- COMMAND` runs it (its ssh command
        line, over the node's shared connection), without starting rdmaprov for it: the lab tests
        run hundreds, polls among them, and each start is a fifth of a second of a core CI's
        VMs need (the converge test runs `lab ssh` itself)."""
        lab = Lab(self.dir)
        command_line = ssh_command(lab, find_node(lab, node), [command])
        return subprocess.run(command_line, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

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
