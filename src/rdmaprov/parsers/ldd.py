"""What the dynamic linker resolves for a program or plugin (`ldd FILE`), as the node report
prints it: a `== FILE` line, then `missing` when there is no such file, or ldd's
`NAME => PATH (0x…)` / `NAME => not found` lines (only those the checks need are kept).

The library a program really loads is what matters, not which libraries exist on the node: a
second NCCL earlier in the search path, or a plugin whose dependency is missing, passes any
check that only looks for files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HEADER = "== "
_RESOLVED = re.compile(r"^\s*(\S+) => (.*?)(?: \(0x[0-9a-fA-F]+\))?\s*$")


@dataclass(frozen=True)
class Linkage:
    exists: bool
    # library name → the file it resolves to, or None when ldd says "not found"
    libraries: dict[str, str | None] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return [name for name, path in self.libraries.items() if path is None]


def parse_ldd(lines: list[str]) -> dict[str, Linkage]:
    """{file: Linkage} for each `== FILE` block."""
    blocks: dict[str, tuple[bool, dict[str, str | None]]] = {}
    current: dict[str, str | None] | None = None
    for line in lines:
        if line.startswith(HEADER):
            current = {}
            blocks[line[len(HEADER) :].strip()] = (True, current)
            continue
        if current is None:
            continue
        if line.strip() == "missing":
            path = next(reversed(blocks))
            blocks[path] = (False, current)
            continue
        match = _RESOLVED.match(line)
        if match and match.group(2):  # old glibc prints "linux-vdso.so.1 =>  (0x…)": nothing resolved
            name, target = match.groups()
            current[name] = None if target == "not found" else target
    return {path: Linkage(exists, libraries) for path, (exists, libraries) in blocks.items()}
