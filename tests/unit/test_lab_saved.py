"""`lab save` and `lab up --from`: what they refuse, with what to do instead, before anything is
stopped, copied or booted (a save and a copy's boot run on the VM lab: tools/test.sh boots the
lab_pair tests' lab from the converge test's save, tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from rdmaprov import cli
from rdmaprov.errors import UserError
from rdmaprov.lab.lab import Lab, LabSettings, save, up
from rdmaprov.lab.nodes import Node, without_setup
from rdmaprov.lab.saved import KEPT, load_saved
from rdmaprov.lab.saved import save as save_nodes

NODE = {
    "name": "node1",
    "address": "10.78.9.11",
    "prefixlen": 24,
    "release": "bookworm",
    "host_keys": ["10.78.9.11 ssh-ed25519 AAAA"],
}


def _saved(folder: Path, record: dict | str) -> Path:
    """A save's folder with its disk and keys, and `record` as its saved.json."""
    (folder / "nodes").mkdir(parents=True)
    (folder / "nodes" / "node1.qcow2").write_bytes(b"QFI\xfb")
    (folder / "gnupg").mkdir()
    for name in KEPT[:2] + KEPT[3:]:
        (folder / name).write_text("key")
    (folder / "saved.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return folder


def test_a_save_is_read_with_its_nodes_subnet_bridge_and_memory(tmp_path):
    record = {"subnet": "10.78.9.0/24", "bridge": "rdt12v", "memory_mb": 768, "nodes": [NODE, {**NODE, "name": "n2"}]}
    folder = _saved(tmp_path / "s", record)
    (folder / "nodes" / "n2.qcow2").write_bytes(b"QFI\xfb")
    saved = load_saved(folder)
    assert (saved.subnet, saved.bridge, saved.memory_mb, saved.releases()) == (
        "10.78.9.0/24",
        "rdt12v",
        768,
        "bookworm,bookworm",
    )
    assert saved.disk("n2") == folder / "nodes" / "n2.qcow2"
    lab = tmp_path / "copy"
    saved.restore_keys(lab)
    assert sorted(p.name for p in lab.iterdir()) == sorted(KEPT)


@pytest.mark.parametrize(
    ("record", "missing", "message"),
    [
        (None, None, r"--from .*/s: no saved.json there: save a lab with `rdmaprov lab save --to .*/s`"),
        ("{", None, r"s/saved.json: not a saved lab's record \(JSONDecodeError.*\): save the lab again"),
        ({"subnet": "x", "nodes": []}, None, r"not a saved lab's record \(KeyError\('bridge'\)\): save the lab again"),
        (
            {"subnet": "10.78.9.0/24", "bridge": "b", "memory_mb": 768, "nodes": [NODE]},
            "nodes/node1.qcow2",
            r"--from .*/s: the save is missing .*/s/nodes/node1.qcow2: save the lab again",
        ),
        (
            {"subnet": "10.78.9.0/24", "bridge": "b", "memory_mb": 768, "nodes": [NODE]},
            "mirror.asc",
            r"the save is missing .*/s/mirror.asc: save the lab again",
        ),
    ],
)
def test_a_save_that_is_not_whole_is_refused_naming_what_is_wrong(tmp_path, record, missing, message):
    folder = tmp_path / "s"
    if record is None:
        folder.mkdir()
    else:
        _saved(folder, record)
    if missing:
        (folder / missing).unlink()
    with pytest.raises(UserError, match=message):
        up(Lab(tmp_path / "copy"), LabSettings(saved=folder))
    assert not (tmp_path / "copy").exists()  # nothing made for a lab that cannot boot


def test_up_from_a_save_takes_none_of_the_options_a_save_fixes(tmp_path):
    line = ["lab", "--dir", str(tmp_path / "copy"), "up", "--from", str(tmp_path), "--subnet", "10.9.0.0/24"]
    args = cli.build_parser().parse_args(line)
    with pytest.raises(UserError, match=r"--from .* boots the saved nodes as they were saved: leave out --subnet$"):
        args.handler(args, Console(), Console())


def test_save_needs_a_running_vm_lab_and_a_new_folder(tmp_path):
    with pytest.raises(UserError, match=r"no lab is up in .*/lab: `rdmaprov lab up`, then save it"):
        save(Lab(tmp_path / "lab"), tmp_path / "to", [])
    node = {**{k: v for k, v in NODE.items() if k != "host_keys"}, "workdir": str(tmp_path / "n1"), "pid": None}
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "state.json").write_text(json.dumps({"kind": "container", "nodes": [{**node, "kind": "container"}]}))
    with pytest.raises(UserError, match=r"lab save keeps VMs' disks; a container lab boots in seconds"):
        save(Lab(lab), tmp_path / "to", [])
    (lab / "state.json").write_text(json.dumps({"kind": "vm", "nodes": [{**node, "kind": "vm"}]}))
    with pytest.raises(UserError, match=r"no lab node 'node9' in .*"):
        save(Lab(lab), tmp_path / "to", ["node9"])
    (tmp_path / "to").mkdir()
    (tmp_path / "to" / "other").write_text("x")
    with pytest.raises(UserError, match=r"--to .*/to: already exists and is not an empty folder: save to a new one"):
        save(Lab(lab), tmp_path / "to", [])
    assert (tmp_path / "to" / "other").read_text() == "x"


def test_a_vm_booted_again_or_from_a_save_skips_the_images_set_up_words():
    """The image's init script sets a node up from its rdmaprov.* kernel arguments, writing
    authorized_keys and /etc/hosts anew: `lab restart` and a saved node's boot leave them out, so
    the node keeps the SSH trust and names apply gave it."""
    cmd = ["qemu-system-x86_64", "-append", "root=/dev/vda rw quiet rdmaprov.hostname=node1 rdmaprov.ip=10.0.0.11/24"]
    assert without_setup(cmd + ["-m", "768"]) == [
        "qemu-system-x86_64",
        "-append",
        "root=/dev/vda rw quiet",
        "-m",
        "768",
    ]


def test_a_save_that_fails_part_way_is_removed_and_says_why(tmp_path):
    """A node whose QEMU does not answer (no QMP socket: the VM is not running): the save stops
    with what to do, and leaves no folder a later `lab up --from` could half boot from."""
    workdir = tmp_path / "n1"
    workdir.mkdir()
    (workdir / "qemu.args").write_text(json.dumps(["qemu-system-x86_64", "-m", "768"]))
    node = Node("node1", "10.78.9.11", 24, "vm", str(workdir))
    state = {"kind": "vm", "subnet": "10.78.9.0/24", "bridge": "b"}
    to = tmp_path / "to"
    with pytest.raises(UserError, match=r"lab node node1: its QEMU did not stop for the copy .*: is the VM running\?"):
        save_nodes(tmp_path, state, [node], {"node1": ["true"]}, {"node1": ["10.78.9.11 ssh-ed25519 AAAA"]}, to)
    assert not to.exists()
    with pytest.raises(UserError, match=r"lab node node1 did not run `sync` \(exit 1\): get it answering"):
        save_nodes(tmp_path, state, [node], {"node1": ["false"]}, {}, to)
    assert not to.exists()
