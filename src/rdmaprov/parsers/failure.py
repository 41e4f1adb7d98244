"""The line of a failed command's output that says why it failed.

Why not the first (or last) line of stderr: package tools print warnings on every run (debconf's
"delaying package configuration", apt's "no stable CLI interface", perl's locale complaints), so
the first line of stderr is usually noise and an operator chases the wrong thing. The error is
in apt's `E:` lines, dpkg's `error processing` blocks, dnf's `Error:` lines, or failing those in
the last line that is not noise. rdmaprov's own scripts' `rdmaprov: …` lines come first (they
name the fix); a full disk is named as such wherever it shows.
"""

from __future__ import annotations

import re

# Printed by working runs too (rdmaprov's own notes among them: quoting.NOTE_PREFIX): never the reason.
_NOISE = re.compile(
    r"^(debconf: (delaying package configuration|unable to initialize frontend|\(|falling back to frontend)"
    r"|WARNING: apt does not have a stable CLI interface"
    r"|perl: warning: |\s*(LANGUAGE|LC_ALL|LC_CTYPE|LANG) = |\s*are supported and installed on your system"
    r"|locale: Cannot set LC_|.*: warning: setlocale: "
    r"|dpkg-preconfigure: unable to re-open stdin"
    r"|(Reading package lists|Building dependency tree|Reading state information)\.\.\."
    r"|W: |N: |rdmaprov note: )"
)
# rdmaprov's own scripts say what failed and how to fix it (quoting.fail_command): that first.
_OURS = re.compile(r"^rdmaprov: ")
_DISK_FULL = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded", re.IGNORECASE)
# The most specific error lines of each tool, most specific first within a tool.
_DPKG_ERROR = re.compile(r"^dpkg(-deb)?: error")
_APT_ERROR = re.compile(r"^E: ")
_APT_GENERIC = re.compile(r"^E: (Sub-process .* returned an error code|Unmet dependencies\.)")
_DNF_ERROR = re.compile(r"^(Error: |Error Summary|  Problem: |No match for argument: )")
_ANY_ERROR = re.compile(r"error|fail|fatal|cannot|can't|unable|denied|not found|no such", re.IGNORECASE)
_MAX_CHARS = 300


def is_noise(line: str) -> bool:
    """A line that package tools print on successful runs as well."""
    return not line.strip() or bool(_NOISE.match(line))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…"


def _with_detail(lines: list[str], index: int) -> str:
    """An error line and the indented line(s) dpkg writes under it ("error processing …:\\n  cause")."""
    parts = [lines[index].strip()]
    for line in lines[index + 1 : index + 3]:
        if not line.startswith((" ", "\t")) or not line.strip():
            break
        parts.append(line.strip())
    return " ".join(parts)


def failure_reason(lines: list[str]) -> str:
    """One line saying why a command failed, from its output (stderr and stdout, in order);
    "" when the output says nothing (the caller then reports the exit status alone)."""
    meaningful = [line.rstrip() for line in lines if not is_noise(line)]
    if not meaningful:
        return ""
    ours = next((line for line in meaningful if _OURS.match(line)), None)
    if ours is not None:
        return _clip(ours)
    full = next((line for line in meaningful if _DISK_FULL.search(line)), None)
    if full is not None:
        return _clip(f"disk full: {full.strip()}")
    for pattern in (_DPKG_ERROR, _DNF_ERROR):
        for index, line in enumerate(meaningful):
            if pattern.match(line):
                return _clip(_with_detail(meaningful, index))
    apt = [line for line in meaningful if _APT_ERROR.match(line)]
    specific = [line for line in apt if not _APT_GENERIC.match(line)]
    if specific or apt:
        return _clip("; ".join(dict.fromkeys(line.strip() for line in (specific or apt)[:2])))
    errors = [line for line in meaningful if _ANY_ERROR.search(line)]
    return _clip((errors or meaningful)[-1].strip())
