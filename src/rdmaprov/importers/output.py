"""Write what an importer made: never over an existing file unless asked, never half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rdmaprov.errors import Problem, UserError


def write_new(path: Path, text: str, force: bool) -> None:
    """Write `text` to `path` through a temp file in its directory; an existing file is replaced
    only with `force` (without it, even one created meanwhile is left alone: os.link refuses)."""
    if path.is_dir():
        raise UserError(Problem(str(path), "is a directory", fix="give the output file's name, e.g. -o prod.yaml"))
    if path.exists() and not force:
        raise UserError(
            Problem(str(path), "exists: not overwritten", fix="pass --force to replace it, or choose another -o")
        )
    directory = path.parent
    try:
        handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise UserError(
            Problem(str(path), f"cannot write here: {exc.strerror}", fix="choose a writable directory")
        ) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(scratch, 0o644)
        if force:
            os.replace(scratch, path)
        else:
            os.link(scratch, path)
    except FileExistsError:
        raise UserError(
            Problem(str(path), "exists: not overwritten", fix="pass --force to replace it, or choose another -o")
        ) from None
    except OSError as exc:
        raise UserError(Problem(str(path), f"cannot write: {exc.strerror}", fix="choose a writable place")) from None
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
