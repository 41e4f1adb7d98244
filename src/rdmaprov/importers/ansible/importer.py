"""`rdmaprov import ansible`: read, convert, render, and prove the result before anyone sees it.

The rendered text is loaded by rdmaprov's own loader (schema, cross-field checks) and every host's
address, user, port and key are compared with what Ansible would use; an output that fails
either is never written (it would be a bug here, reported as such).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rdmaprov.errors import Problem, UserError
from rdmaprov.importers.ansible.convert import Converted, convert
from rdmaprov.importers.ansible.reader import read_ansible
from rdmaprov.importers.ansible.render import render
from rdmaprov.inventory.loader import load_inventory
from rdmaprov.inventory.model import resolve_path

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# File names that say nothing about the cluster: the directory's name is taken instead.
_GENERIC = {"inventory", "inventories", "hosts", "inv", "static", "main", "config", "ansible", ""}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BUG = Problem(
    "rdmaprov import",
    "the inventory made from this Ansible inventory is not what Ansible would use (a bug in rdmaprov import)",
    fix="please report it with the Ansible inventory; nothing was written",
)
_MISSING_FIX = {
    "ssh.known_hosts": "put every node's host key in it before the first run",
    "ssh.key": "put the private key there before the first run, or correct ansible_ssh_private_key_file",
}
# Where the loader reports key and known_hosts files it cannot use (the user's files, not a bug).
_FILE_SETTINGS = ("ssh.key", "ssh.known_hosts")


@dataclass(frozen=True)
class ImportResult:
    text: str
    cluster: str
    hosts: int
    groups: int
    kept_as_comments: int
    notes: list[str]
    warnings: list[Problem]


def cluster_name(path: Path) -> str:
    """A name from the file (`prod.ini` → prod), or from the first directory above it whose name says
    more (DeepOps' `~/deepops/config/inventory` → deepops)."""
    candidates = [path.name.split(".")[0]] + [parent.name for parent in path.resolve().parents][:3]
    chosen = next((c for c in candidates if c.lower() not in _GENERIC), candidates[0])
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", chosen).lstrip("_.-")
    return name or "cluster"


def _known_hosts(value: str, cwd: Path) -> str:
    """`~` stays for rdmaprov to expand; a relative path is made absolute (the output may live elsewhere)."""
    if re.search(r"[\x00-\x1f\x7f-\x9f]", value):
        raise UserError(Problem("--known-hosts", f"{value!r} contains a control character", fix="give a plain path"))
    if value.startswith("~") or os.path.isabs(value):
        return value
    return os.path.normpath(cwd / value)


def _as_imported(problem: Problem, source: Path) -> Problem:
    """A problem the loader found in the made inventory, told about the Ansible file (the made file is
    not written yet: its lines mean nothing to the user)."""
    where = f"{problem.path} of the imported inventory" if problem.path else "the imported inventory"
    fix = problem.fix
    if problem.message.endswith("does not exist"):  # the loader's fix speaks of the lab
        fix = next((text for suffix, text in _MISSING_FIX.items() if problem.path.endswith(suffix)), fix)
    return Problem(str(source), f"{where}: {problem.message}", fix=fix)


def _prove(conv: Converted, text: str, source: Path) -> list[Problem]:
    """Load the text as rdmaprov will and compare each host's connection with Ansible's; the
    loader's warnings (a key file not there yet) are returned for the user."""
    with tempfile.TemporaryDirectory(prefix="rdmaprov-import-") as scratch:
        path = Path(scratch) / "inventory.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            inventory = load_inventory(path, require_files=False)
        except UserError as exc:
            # Key and known_hosts files that cannot be used are the user's to fix; anything else is ours.
            if all(p.path.endswith(_FILE_SETTINGS) for p in exc.problems):
                raise UserError([_as_imported(p, source) for p in exc.problems]) from None
            raise UserError([_BUG, *(_as_imported(p, source) for p in exc.problems)]) from None
    wrong = []
    for name, want in conv.expected.items():
        host = inventory.hosts[name]
        found = {"address": host.address, "user": host.ssh.user, "port": host.ssh.port, "key": host.ssh.key}
        want = {**want, "key": resolve_path(want["key"], path.parent)}
        if found != want:
            wrong.append(Problem(str(source), f"host {name!r} would connect as {found}, Ansible as {want}"))
    if wrong:
        raise UserError([_BUG, *wrong])
    return [_as_imported(p, source) for p in inventory.warnings]


def import_ansible(
    path: str | Path, name: str | None = None, known_hosts: str = DEFAULT_KNOWN_HOSTS, cwd: Path | None = None
) -> ImportResult:
    """The rdmaprov inventory text for the Ansible inventory at `path`; raises UserError for what it cannot use."""
    source = Path(path)
    cwd = cwd or Path.cwd()
    if name is not None and not _NAME.fullmatch(name):
        raise UserError(Problem("--name", f"{name!r} is not a cluster name", fix="use letters, digits, '_', '.', '-'"))
    inventory = read_ansible(source)
    conv = convert(inventory, name or cluster_name(source), _known_hosts(known_hosts, cwd), cwd)
    text = render(conv, derived_name=name is None)
    warnings = inventory.warnings + _prove(conv, text, source)
    kept = len(conv.cluster.leftovers) + sum(len(e.leftovers) for e in conv.hosts + conv.groups)
    return ImportResult(text, conv.name, len(conv.hosts), len(conv.groups), kept, conv.notes, warnings)
