"""Managed files: written atomically (temp file + rename), with a unified diff for reports."""

from __future__ import annotations

import difflib
import shlex
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.context import ctx_state

from rdmaprov.facts.files import ManagedFile


def unified_diff(path: str, old: bytes | None, new: bytes) -> str:
    """Diff as `diff -u` shows it; binary-safe enough for config files."""
    before = (old or b"").decode("utf-8", "replace").splitlines(keepends=True)
    after = new.decode("utf-8", "replace").splitlines(keepends=True)
    source = path if old is not None else "/dev/null"
    return "".join(difflib.unified_diff(before, after, fromfile=source, tofile=path))


def _record_diff(diff: str) -> None:
    diffs = getattr(ctx_state.get(), "rdmaprov_diffs", None)
    if diffs is not None and host.current_op_hash:
        diffs[(host.name, host.current_op_hash)] = diff


@operation()
def managed_file(path: str, content: str | None, mode: str = "644", user: str = "root", group: str = "root", after_change: str | None = None):
    """Make `path` hold exactly `content` with the given mode and owner (content None: absent).

    The new content goes to a temp file beside the target and is renamed over it, so an
    interrupted apply never leaves a half-written config. `after_change` runs once when the
    file changed (e.g. `systemctl daemon-reload`).
    """
    current = host.get_fact(ManagedFile, path=path)
    quoted = shlex.quote(path)
    if content is None:
        if not current.exists:
            host.noop(f"{path} is absent")
            return
        _record_diff(unified_diff(path, current.content, b"").replace(f"+++ {path}", "+++ /dev/null", 1))
        yield StringCommand(f"rm -f {quoted}")
        if after_change:
            yield StringCommand(after_change)
        return
    wanted = content.encode("utf-8")
    if current.content != wanted:
        _record_diff(unified_diff(path, current.content, wanted))
        temp = f"{path}.rdmaprov-tmp"
        parent = shlex.quote(path.rsplit("/", 1)[0] or "/")
        yield StringCommand(f"mkdir -p {parent}")
        yield FileUploadCommand(BytesIO(wanted), temp)
        yield StringCommand(f"chown {shlex.quote(user)}:{shlex.quote(group)} {shlex.quote(temp)} && chmod {mode} {shlex.quote(temp)} && mv -f {shlex.quote(temp)} {quoted}")
        if after_change:
            yield StringCommand(after_change)
        return
    if current.mode != mode.lstrip("0") or current.user != user or current.group != group:
        yield StringCommand(f"chown {shlex.quote(user)}:{shlex.quote(group)} {quoted} && chmod {mode} {quoted}")
        return
    host.noop(f"{path} is up to date")
