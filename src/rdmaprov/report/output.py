"""Files a run writes where the user asked (--junit, --report): a path that cannot be written is
the user's to fix, said in one line naming it, never a traceback after the run's work is done."""

from __future__ import annotations

from pathlib import Path

from rdmaprov.errors import Problem, UserError


def write_output(path: str, text: str, what: str) -> None:
    """`text` into `path`; UserError naming the file when it cannot be written."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        fix = "name a file in a directory that exists and that you can write"
        raise UserError(Problem(path, f"cannot write the {what}: {exc.strerror or exc}", fix=fix)) from None
