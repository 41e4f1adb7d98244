"""Ansible host patterns in inventories: `gpu[01:16]`, `db-[a:f]`, `node[1:9:2]`, `host:2222`.

The expansion follows ansible-core's (inventory plugins' expand_hostname_range): a zero-padded
start keeps its width, single letters count through a-z then A-Z, a third number is the step.
The number of hosts a pattern stands for is worked out before any is made, so a pattern such as
`n[0:99999999]` is refused instead of filling the memory.
"""

from __future__ import annotations

import itertools
import re
import string

from rdmaprov.importers.ansible.model import MAX_HOSTS

_BRACKETED_IPV6 = re.compile(r"\[([0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?)\](?::([0-9]+))?")


class PatternError(ValueError):
    """A host pattern Ansible would refuse too, or one that stands for too many hosts."""


def split_port(pattern: str) -> tuple[str, int | None]:
    """`name:port` → (name, port). A colon inside a range (`gpu[01:16]`) is not a port; a name
    with several colons (an IPv6 address) has none, as Ansible reads it."""
    bracketed = _BRACKETED_IPV6.fullmatch(pattern)
    if bracketed and ("::" in bracketed.group(1) or bracketed.group(1).count(":") > 2):  # not a range
        return bracketed.group(1), int(bracketed.group(2)) if bracketed.group(2) else None
    colons, depth = [], 0
    for index, char in enumerate(pattern):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == ":" and depth == 0:
            colons.append(index)
    if len(colons) == 1:
        name, port = pattern[: colons[0]], pattern[colons[0] + 1 :]
        if port.isascii() and port.isdigit():
            return name, int(port)
        if not port:
            raise PatternError(f"host pattern {pattern!r} ends in ':' (a ':' introduces a port)")
    return pattern, None


def _sequence(bounds_text: str) -> list[str]:
    bounds = bounds_text.split(":")
    if len(bounds) not in (2, 3):
        raise PatternError(f"range [{bounds_text}] must be [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise PatternError(f"range [{bounds_text}] has no end")
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        raise PatternError(f"range [{bounds_text}] has a step that is not a number") from None
    if step < 1:
        raise PatternError(f"range [{bounds_text}] has a step below 1")
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and len(end) != width:
        raise PatternError(f"range [{bounds_text}]: a zero-padded begin and the end must have the same width")
    letters = string.ascii_letters
    if begin in letters and end in letters and len(begin) == len(end) == 1:
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise PatternError(f"range [{bounds_text}] begins after its end")
        return list(letters[first : last + 1 : step])
    if not (begin.isascii() and begin.isdigit() and end.isascii() and end.isdigit()):
        raise PatternError(f"range [{bounds_text}] must count numbers or single letters")
    numbers = range(int(begin), int(end) + 1, step)
    if len(numbers) > MAX_HOSTS:
        raise PatternError(f"range [{bounds_text}] stands for more than {MAX_HOSTS:,} hosts")
    return [str(n).zfill(width) for n in numbers]


def expand(pattern: str) -> list[str]:
    """Every host name a pattern stands for, in Ansible's order."""
    parts: list[list[str]] = []
    rest = pattern
    while "[" in rest:
        head, _, tail = rest.partition("[")
        bounds, closed, rest = tail.partition("]")
        if not closed:
            raise PatternError(f"host pattern {pattern!r} has a '[' without its ']'")
        parts += [[head], _sequence(bounds)]
    parts.append([rest])
    total = 1
    for part in parts:
        total *= len(part)
        if total > MAX_HOSTS:
            raise PatternError(f"host pattern {pattern!r} stands for more than {MAX_HOSTS:,} hosts")
    return ["".join(combo) for combo in itertools.product(*parts)]


def hosts_of(pattern: str) -> tuple[list[str], int | None]:
    """Host names and the port (if any) one inventory entry stands for."""
    name, port = split_port(pattern.strip())
    return expand(name) if "[" in name else [name], port
