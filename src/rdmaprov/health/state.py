"""What rdmaprov keeps between runs on the control machine, one directory per cluster (XDG state
dir; RDMAPROV_STATE moves it): port counter reads, gate baselines. Files are JSON, written whole
or not at all (a run interrupted mid-write must not cost every node its history)."""

from __future__ import annotations

import fcntl
import json
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def load_section(path: Path, key: str) -> dict[str, object]:
    """The file's `key` mapping; {} when there is none yet or the file cannot be read. Its values
    are as the file has them (a hand-edited file may hold anything): each owner checks its own."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    section = data.get(key, {}) if isinstance(data, dict) else {}
    return section if isinstance(section, dict) else {}


def save_section(path: Path, key: str, section: Mapping[str, object]) -> None:
    """Write {key: section} atomically: a temporary file in the same directory, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as handle:
        json.dump({key: section}, handle, indent=1, sort_keys=True)
    Path(handle.name).replace(path)


@contextmanager
def updating(path: Path, key: str) -> Iterator[dict[str, object]]:
    """The file's `key` mapping, for this process alone until the block ends, then written back
    (atomically) if the block completed: two runs at once on one cluster (a scheduled check
    beside an apply) each add their figures, instead of the later one dropping the earlier's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        section = load_section(path, key)
        yield section
        save_section(path, key, section)
