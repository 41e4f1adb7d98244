"""`--limit`: pick hosts by name, group or glob, as Ansible users expect."""

from __future__ import annotations

from fnmatch import fnmatchcase

from rdmaprov.errors import UserError
from rdmaprov.inventory.model import Inventory


def select_hosts(inventory: Inventory, patterns: list[str] | None) -> list[str]:
    """Host names matching any pattern (comma-separated allowed); all hosts when no pattern.

    A pattern is a host name, a group name, or a glob over either. A pattern matching nothing is
    an error: a typo must not silently shrink the run to zero hosts.
    """
    if patterns is None:
        return inventory.host_names()
    names = [p.strip() for raw in patterns for p in raw.split(",") if p.strip()]
    if not names:
        given = ", ".join(repr(raw) for raw in patterns)
        raise UserError(
            f"--limit {given} names no host: give host names, group names or globs (e.g. --limit gpu1,gpu2 or --limit "
            "'gpu*'), "
            "or leave --limit out to select every host"
        )
    wanted: set[str] = set()
    for pattern in names:
        matched = [h for h in inventory.hosts if fnmatchcase(h, pattern)]
        for group, members in inventory.groups.items():
            if fnmatchcase(group, pattern):
                matched.extend(members)
        if not matched:
            known = ", ".join(list(inventory.hosts) + [f"@{g}" for g in inventory.groups])
            raise UserError(f"--limit {pattern!r} matches no host or group in {inventory.path} (known: {known})")
        wanted.update(matched)
    return [h for h in inventory.hosts if h in wanted]
