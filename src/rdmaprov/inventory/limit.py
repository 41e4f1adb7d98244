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
    if not patterns:
        return inventory.host_names()
    wanted: list[str] = []
    for raw in patterns:
        for pattern in filter(None, (p.strip() for p in raw.split(","))):
            matched = [h for h in inventory.hosts if fnmatchcase(h, pattern)]
            for group, members in inventory.groups.items():
                if fnmatchcase(group, pattern):
                    matched.extend(members)
            if not matched:
                known = ", ".join(list(inventory.hosts) + [f"@{g}" for g in inventory.groups])
                raise UserError(f"--limit {pattern!r} matches no host or group in {inventory.path} (known: {known})")
            wanted.extend(m for m in matched if m not in wanted)
    return [h for h in inventory.hosts if h in wanted]
