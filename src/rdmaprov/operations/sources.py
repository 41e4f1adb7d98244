"""Package sources: make an internal mirror the only source (air-gapped) or put the others back."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand

from rdmaprov.engine.desired import operation
from rdmaprov.engine.factcache import fact
from rdmaprov.facts.files import FilesIn

DISABLED_SUFFIX = ".rdmaprov-disabled"
SOURCE_FILES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/yum.repos.d")


def _is_source(path: str) -> bool:
    return path == "/etc/apt/sources.list" or path.endswith((".list", ".sources", ".repo"))


@operation()
def only_sources(keep: list[str], exclusive: bool):
    """With exclusive, rename every other apt/yum source aside; without, rename them back."""
    files = fact(FilesIn, paths=SOURCE_FILES)
    moves = []
    if exclusive:
        # rdmaprov's own repositories (CUDA, eRDMA: rdmaprov-*) are declared, so they stay.
        moves = [
            (p, p + DISABLED_SUFFIX)
            for p in files
            if _is_source(p) and p not in keep and not p.rsplit("/", 1)[-1].startswith("rdmaprov-")
        ]
    else:
        moves = [(p, p[: -len(DISABLED_SUFFIX)]) for p in files if p.endswith(DISABLED_SUFFIX)]
    if not moves:
        host.noop("package sources as declared")
        return
    for src, dest in moves:
        yield StringCommand(f"mv -f {shlex.quote(src)} {shlex.quote(dest)}")
