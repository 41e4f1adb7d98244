"""Managed files and managed blocks: written atomically (temp file + rename), with a unified diff.

A managed file belongs to rdmaprov whole; a managed block is rdmaprov's part of a file that others
also write (authorized_keys, the system known_hosts): lines outside the block are left alone.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.engine.notes import record_diff
from rdmaprov.facts.files import BlockFile, BlockFileState, FileSha256, FileState, ManagedFile
from rdmaprov.parsers.blocks import replace_block
from rdmaprov.quoting import fail_command


def unified_diff(path: str, old: bytes | None, new: bytes | None) -> str:
    """Diff as `diff -u` shows it; binary-safe enough for config files."""
    before = (old or b"").decode("utf-8", "replace").splitlines(keepends=True)
    after = (new or b"").decode("utf-8", "replace").splitlines(keepends=True)
    source = path if old is not None else "/dev/null"
    target = path if new is not None else "/dev/null"
    return "".join(difflib.unified_diff(before, after, fromfile=source, tofile=target))


@dataclass(frozen=True)
class _OnNode:
    """What a node holds at `path`, as far as converging it needs: whether it is there, whether
    it already holds the wanted bytes, and its mode and owner."""

    exists: bool
    same: bool
    mode: str | None
    user: str | None
    group: str | None


def _converge(
    path: str,
    on_node: _OnNode,
    wanted: bytes | None,
    mode: str,
    user: str,
    group: str,
    after_change: str | None,
    diff: Callable[[], str] | None = None,
    digest: str = "",
) -> Iterator:
    """The commands that take `path` to `wanted` (None: absent), through a temp file renamed over
    it; none when it matches. `diff` shows the change (config files); `digest` has the upload
    checked on the node before the rename (programs, where no diff is shown)."""
    quoted = shlex.quote(path)
    if wanted is None:
        if not on_node.exists:
            host.noop(f"{path} is absent")
            return
        if diff:
            record_diff(diff())
        yield StringCommand(f"rm -f {quoted}")
        if after_change:
            yield StringCommand(after_change)
        return
    owner = f"{shlex.quote(user)}:{shlex.quote(group)}"
    if not on_node.same:
        if diff:
            record_diff(diff())
        temp = f"{path}.rdmaprov-tmp"
        staged = shlex.quote(temp)
        yield StringCommand(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0] or '/')}")
        yield FileUploadCommand(BytesIO(wanted), temp)
        rename = f"chown {owner} {staged} && chmod {mode} {staged} && mv -f {staged} {quoted}"
        if digest:
            damaged = fail_command(
                f"{path} arrived damaged (sha256 differs from {digest[:16]}…)", "run the apply again"
            )
            rename = (
                f"{{ echo {shlex.quote(digest + '  ' + temp)} | sha256sum -c --quiet - || {damaged}; }} && {rename}"
            )
        yield StringCommand(rename)
        if after_change:
            yield StringCommand(after_change)
        return
    if on_node.mode != mode.lstrip("0") or on_node.user != user or on_node.group != group:
        yield StringCommand(f"chown {owner} {quoted} && chmod {mode} {quoted}")
        return
    host.noop(f"{path} is up to date" + (f" (sha256 {digest[:16]})" if digest else ""))


def file_commands(
    path: str, current: FileState, content: str | None, mode: str, user: str, group: str, after_change: str | None
) -> Iterator:
    """The commands that take `path` from `current` to `content` (None: absent); none when it matches."""
    wanted = None if content is None else content.encode("utf-8")
    on_node = _OnNode(current.exists, current.content == wanted, current.mode, current.user, current.group)
    yield from _converge(
        path, on_node, wanted, mode, user, group, after_change, diff=lambda: unified_diff(path, current.content, wanted)
    )


@operation()
def managed_file(
    path: str,
    content: str | None,
    mode: str = "644",
    user: str = "root",
    group: str = "root",
    after_change: str | None = None,
    managed: bool = True,
):
    """Make `path` hold exactly `content` with the given mode and owner (content None: absent).

    The new content goes to a temp file beside the target and is renamed over it, so an
    interrupted apply never leaves a half-written config. `after_change` runs once when the
    file changed (e.g. `systemctl daemon-reload`). `managed` False: the file is not rdmaprov's on
    this host (a site's own slurm.conf): it is left as it is, whatever it holds.
    """
    if not managed:
        host.noop(f"{path} is not managed here")
        return
    current = fact(ManagedFile, path=path)
    yield from file_commands(path, current, content, mode, user, group, after_change)


def block_commands(
    path: str, marker: str, lines: Sequence[str], current: BlockFileState, mode: str, user: str, group: str
) -> Iterator:
    """Commands that make rdmaprov's block in `path` hold `lines`, keeping the rest of the file.
    The file is read whole (for the diff and the rest of it) only when its sha256 says it differs."""
    if not current.exists and not lines:
        host.noop(f"{path} is absent and no block is wanted")
        return
    wanted = replace_block(current.outside.decode("utf-8", "replace"), marker, lines).encode("utf-8")
    if current.exists and hashlib.sha256(wanted).hexdigest() == current.sha256:
        on_node = _OnNode(True, True, current.mode, current.user, current.group)
        yield from _converge(path, on_node, wanted, mode, user, group, None)
        return
    whole = fact(ManagedFile, path=path)
    yield from file_commands(path, whole, replace_block(whole.text, marker, lines), mode, user, group, None)


@operation()
def managed_block(
    path: str, marker: str, lines: Sequence[str], mode: str = "644", user: str = "root", group: str = "root"
):
    """Keep exactly `lines` between rdmaprov's BEGIN/END markers in `path`; other lines stay."""
    current = fact(BlockFile, path=path, marker=marker)
    yield from block_commands(path, marker, lines, current, mode, user, group)


@operation()
def shipped_file(
    path: str,
    data: bytes | None,
    mode: str = "644",
    user: str = "root",
    group: str = "root",
    after_change: str | None = None,
):
    """Make `path` hold exactly `data` (None: absent), judged by sha256: for programs and archives
    too large to read back for a diff. The upload is checked against its sha256 on the node before
    it is renamed into place."""
    current = fact(FileSha256, path=path)
    digest = hashlib.sha256(data).hexdigest() if data is not None else ""
    on_node = _OnNode(current.sha256 is not None, current.sha256 == digest, current.mode, current.user, current.group)
    yield from _converge(path, on_node, data, mode, user, group, after_change, digest=digest)


# A key of a JSON document by its path from the top, ("default-ulimits", "memlock"), and the value
# rdmaprov wants there (None: absent). Pairs, not a mapping: pyinfra hashes an operation's
# arguments as JSON, whose keys are strings.
JsonKey = tuple[str, ...]
JsonKeys = Sequence[tuple[JsonKey, object]]


def _set_key(document: dict, key: JsonKey, value: object) -> None:
    """Set `key` to `value`, making the tables on its way (a non-table on its way is replaced)."""
    table = document
    for name in key[:-1]:
        if not isinstance(table.get(name), dict):
            table[name] = {}
        table = table[name]
    table[key[-1]] = value


def _remove_key(document: dict, key: JsonKey) -> None:
    """Remove `key`, and each table on its way that this leaves empty."""
    if len(key) == 1:
        document.pop(key[0], None)
        return
    below = document.get(key[0])
    if isinstance(below, dict):
        _remove_key(below, key[1:])
        if not below:
            del document[key[0]]


def merged_json(path: str, text: str | None, keys: JsonKeys) -> str | None:
    """The JSON object `text` (None: no file) with each of `keys` set to its value, or removed
    where the value is None, every other key kept as it was; None when the removals left nothing
    (no file). Unchanged settings keep the file's own text, whatever its layout. A file that is
    not a JSON object is refused with what to fix: it belongs to others too (dockerd reads it,
    nvidia-ctk writes it)."""
    before: object = {}
    if text is not None and text.strip():
        try:
            before = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}): fix it or remove it, then apply again") from None
        if not isinstance(before, dict):
            raise ValueError(f"{path} holds JSON that is not an object: make it one ({{...}}), then apply again")
    document = json.loads(json.dumps(before))  # a deep copy, to compare with
    for key, value in keys:
        if value is None:
            _remove_key(document, key)
        else:
            _set_key(document, key, value)
    if document == before:
        return text
    return json.dumps(document, indent=4) + "\n" if document else None


@operation()
def managed_json_keys(path: str, keys: JsonKeys, after_change: str | None = None):
    """Keep rdmaprov's `keys` of the JSON object in `path` (a None value: absent), with the file's
    other keys as they are; the file is rewritten only when a key differs, and removed when no
    key is left. For configuration files that several tools write (Docker's daemon.json)."""
    current = fact(ManagedFile, path=path)
    wanted = merged_json(path, current.text if current.exists else None, keys)
    mode, user, group = current.mode or "644", current.user or "root", current.group or "root"  # the owner's own
    yield from file_commands(path, current, wanted, mode, user, group, after_change)
