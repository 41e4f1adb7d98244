"""`rdmaprov lab save` and `lab up --from`: a VM lab's nodes kept as they are now (converged,
say) and booted again later, or beside the original, without converging them again.

A converge of an emulated node takes minutes of its CPU; booting a copy of its disk takes one.
A saved node is its disk (the lab's copy-on-write overlay, backed by the cached image), copied
while its QEMU is stopped: QEMU drains and flushes the disk when it stops, and the guest has
synced its own writes just before, so the copy is what a power cut at that moment leaves, which
ext4's journal replays at the copy's first boot. The node's address, name, host keys, the lab's
SSH key and the mirror's signing key go with it: a copy is the same cluster, so it keeps the
saved lab's subnet and bridge name, and boots only where those are free: once the lab it was
saved from is down, or in a network namespace of its own (`ip netns exec NAME rdmaprov lab up
--from DIR`), which is how the test suite runs a copy beside the original.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rdmaprov.errors import UserError
from rdmaprov.lab.nodes import Node
from rdmaprov.lab.qmp import QmpError, execute

if TYPE_CHECKING:
    from rdmaprov.lab.lab import LabSettings

SAVED_FILE = "saved.json"  # written last: a folder holding it holds a whole save
# what goes with the nodes: the lab's SSH key pair (the nodes' authorized key) and the mirror's
# signing key (the nodes' apt trusts it), so that the copy's lab is the one its nodes know
KEPT = ("id_ed25519", "id_ed25519.pub", "gnupg", "mirror.asc")


@dataclass(frozen=True)
class Saved:
    """A saved lab as `lab up --from` reads it."""

    dir: Path
    subnet: str
    bridge: str
    memory_mb: int
    nodes: list[dict]

    def settings(self, given: LabSettings) -> LabSettings:
        """`lab up`'s settings for booting these nodes: theirs, not the defaults."""
        return replace(
            given,
            kind="vm",
            release=self.releases(),
            nodes=len(self.nodes),
            subnet=self.subnet,
            bridge=self.bridge,
            memory_mb=self.memory_mb,
        )

    @property
    def subnet_in_use(self) -> str:
        """What to do when the saved subnet is taken on this machine."""
        return (
            "a copy of a saved lab keeps its addresses: take the lab using them down, or boot the copy in a network "
            f"namespace of its own (`ip netns exec NAME rdmaprov lab up --from {self.dir}`)"
        )

    def nodes_in(self, lab_dir: Path) -> list[Node]:
        """The saved nodes, as a lab in `lab_dir` records them."""
        return [
            Node(
                name=entry["name"],
                address=entry["address"],
                prefixlen=int(entry["prefixlen"]),
                kind="vm",
                workdir=str(lab_dir / "nodes" / entry["name"]),
                release=entry["release"],
            )
            for entry in self.nodes
        ]

    def disk(self, name: str) -> Path:
        return self.dir / "nodes" / f"{name}.qcow2"

    def host_keys(self, name: str) -> list[str]:
        """The node's known_hosts lines as the lab pinned them."""
        [node] = [node for node in self.nodes if node["name"] == name]
        return list(node["host_keys"])

    def releases(self) -> str:
        return ",".join(node["release"] for node in self.nodes)

    def restore_keys(self, lab_dir: Path) -> None:
        """The saved lab's SSH key pair and mirror signing key into a new lab's folder."""
        lab_dir.mkdir(parents=True, exist_ok=True)
        _copy_kept(self.dir, lab_dir)


def _copy_kept(source: Path, target: Path) -> None:
    """What goes with the nodes (KEPT), from one lab or save folder to another: the folders
    without the sockets a gpg-agent may have left in them."""
    for name in KEPT:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("S.*"))
        else:
            shutil.copy2(source / name, target / name)


def load_saved(folder: Path) -> Saved:
    """The save in `folder`, or a UserError saying what is wrong with it."""
    record = folder / SAVED_FILE
    if not record.is_file():
        raise UserError(f"--from {folder}: no {SAVED_FILE} there: save a lab with `rdmaprov lab save --to {folder}`")
    try:
        data = json.loads(record.read_text())
        saved = Saved(folder, data["subnet"], data["bridge"], int(data["memory_mb"]), list(data["nodes"]))
        if not all(saved.host_keys(n["name"]) for n in saved.nodes):
            raise ValueError("a node without its host keys")
        missing = [str(saved.disk(n["name"])) for n in saved.nodes if not saved.disk(n["name"]).is_file()]
        missing += [str(folder / name) for name in KEPT if not (folder / name).exists()]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{record}: not a saved lab's record ({exc!r}): save the lab again") from exc
    if missing:
        raise UserError(f"--from {folder}: the save is missing {', '.join(missing)}: save the lab again")
    return saved


def _memory_mb(node: Node) -> int:
    """The memory the VM was booted with, from its recorded QEMU command line."""
    args = json.loads(node.qemu_args.read_text())
    return int(args[args.index("-m") + 1])


def save(
    lab_dir: Path, state: dict, nodes: list[Node], ssh: dict[str, list[str]], host_keys: dict[str, list[str]], to: Path
) -> None:
    """Copy each node's disk (its guest synced, its QEMU stopped meanwhile), its pinned host keys
    (`host_keys`) and what the lab's nodes trust into `to`, which must be new or empty; `ssh`
    has each node's command line for running `sync` on it. A save that fails part way is
    removed, not left to boot half."""
    if state.get("kind") != "vm":
        raise UserError("lab save keeps VMs' disks; a container lab boots in seconds: `rdmaprov lab up` again")
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise UserError(f"--to {to}: already exists and is not an empty folder: save to a new one")
    for node in nodes:
        synced = subprocess.run(ssh[node.name], capture_output=True, text=True, timeout=120)
        if synced.returncode != 0:
            raise UserError(
                f"lab node {node.name} did not run `sync` ({synced.stderr.strip() or f'exit {synced.returncode}'}): "
                f"get it answering (`rdmaprov lab restart {node.name}`), then save again"
            )
    try:
        (to / "nodes").mkdir(parents=True)
        for node in nodes:
            _copy_disk(node, to / "nodes" / f"{node.name}.qcow2")
        _copy_kept(lab_dir, to)
        record = {
            "saved_from": str(lab_dir),
            "subnet": state["subnet"],
            "bridge": state["bridge"],
            "memory_mb": _memory_mb(nodes[0]),
            "nodes": [
                {
                    "name": n.name,
                    "address": n.address,
                    "prefixlen": n.prefixlen,
                    "release": n.release,
                    "host_keys": host_keys[n.name],
                }
                for n in nodes
            ],
        }
        (to / SAVED_FILE).write_text(json.dumps(record, indent=2) + "\n")
    except OSError as exc:  # a full disk, say
        shutil.rmtree(to, ignore_errors=True)
        raise UserError(f"--to {to}: the save could not be written ({exc}); nothing of it is left") from exc
    except BaseException:
        shutil.rmtree(to, ignore_errors=True)
        raise


def _copy_disk(node: Node, target: Path) -> None:
    """The node's disk copied while its QEMU is stopped (stopping drains and flushes it)."""
    try:
        execute(node.qmp, "stop")
    except QmpError as exc:
        raise UserError(
            f"lab node {node.name}: its QEMU did not stop for the copy ({exc}): is the VM running?"
        ) from exc
    try:
        shutil.copyfile(Path(node.workdir) / "disk.qcow2", target)
    finally:
        try:
            execute(node.qmp, "cont")
        except QmpError as exc:
            raise UserError(
                f"lab node {node.name}: its QEMU did not go on after the copy ({exc}): "
                f"`rdmaprov lab restart {node.name}`"
            ) from exc
