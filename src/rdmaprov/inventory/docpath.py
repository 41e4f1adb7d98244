"""Where a value sits in the inventory document, and that place written as users write it.

Apart from the YAML reader (source.py) so that what the nodes' own check imports (the settings'
readers) needs no PyYAML.
"""

from __future__ import annotations

DocPath = tuple[str | int, ...]


def format_path(path: DocPath) -> str:
    """Dotted path as users write it: groups.gpu.hosts.gpu3.ssh.port, packages.extra[2]."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
