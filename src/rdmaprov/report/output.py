"""Files a run writes where the user asked (--junit, --report): a path that cannot be written is
the user's to fix, said in one line naming it, never a traceback after the run's work is done.
And `--json` documents on standard output, written as they are encoded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rdmaprov.errors import Problem, UserError


def write_output(path: str, text: str, what: str) -> None:
    """`text` into `path`; UserError naming the file when it cannot be written."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        fix = "name a file in a directory that exists and that you can write"
        raise UserError(Problem(path, f"cannot write the {what}: {exc.strerror or exc}", fix=fix)) from None


def print_json(doc: object) -> None:
    """`doc` as JSON indented by 2 on standard output, the bytes json.dumps would give, written
    piece by piece as they are encoded: json.dumps with an indent holds every piece and then
    the whole text, about six times the output's size (a verify of 2,000 GPU nodes prints
    116 MB, bench/RESULTS.md)."""
    pieces: list[str] = []
    for piece in json.JSONEncoder(indent=2).iterencode(doc):
        pieces.append(piece)
        if len(pieces) >= 8192:
            sys.stdout.write("".join(pieces))
            pieces.clear()
    pieces.append("\n")
    sys.stdout.write("".join(pieces))
