"""Managed blocks inside files other tools also write: find rdmaprov's block, replace it."""

from __future__ import annotations

from collections.abc import Sequence


def markers(marker: str) -> tuple[str, str]:
    """The block's first and last lines."""
    return f"# BEGIN {marker} (managed by rdmaprov)", f"# END {marker}"


def block_lines(text: str, marker: str) -> list[str]:
    """The lines inside the block (empty when there is none)."""
    begin, end = markers(marker)
    lines = text.splitlines()
    if begin not in lines:
        return []
    start = lines.index(begin) + 1
    stop = lines.index(end, start) if end in lines[start:] else len(lines)
    return lines[start:stop]


def replace_block(text: str, marker: str, new_lines: Sequence[str]) -> str:
    """`text` with the block's lines replaced (appended if missing, removed if new_lines is empty).

    Everything outside the markers is kept byte for byte, so keys and hosts that users or other
    tools added are never touched.
    """
    begin, end = markers(marker)
    lines = text.splitlines()
    if begin in lines:
        start = lines.index(begin)
        stop = lines.index(end, start) + 1 if end in lines[start:] else len(lines)
        before, after = lines[:start], lines[stop:]
    else:
        before, after = lines, []
    block = [begin, *new_lines, end] if new_lines else []
    out = before + block + after
    return "\n".join(out) + "\n" if out else ""
