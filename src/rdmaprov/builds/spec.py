"""What one build is: its source, its script, where it installs, and the identity that decides
whether an existing result can be reused; and the recipe that makes a node's build from its
settings and facts (operations/builds.py runs them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo

ARTIFACT_DIR = "/var/cache/rdmaprov/artifacts"
WORK_ROOT = "/var/cache/rdmaprov/build"
MARKER = ".rdmaprov-build"


@dataclass(frozen=True)
class RecipeSettings:
    """What a recipe needs from one node's inventory: the build operations' argument.

    Operations are fingerprinted by their arguments (engine/desired.py) to tell drift from a
    changed inventory. Before these classes the argument was a mapping; `fingerprinted` gives
    that same mapping, so the fingerprints earlier releases recorded on the nodes still match.
    `OMITTED_WHEN_NONE` names the fields that mapping left out when they were not set.
    """

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def fingerprinted(self) -> dict[str, object]:
        found: dict[str, object] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in self.OMITTED_WHEN_NONE:
                continue
            if isinstance(value, RecipeSettings):
                value = value.fingerprinted()
            elif isinstance(value, Mapping):
                value = dict(value)
            found[field.name] = value
        return found


@dataclass(frozen=True)
class Source:
    """Where a build's source comes from.

    kind `git` (url + ref) and `url` (a tarball) are fetched on the building node; `file` is a
    tarball on the control machine, uploaded (air-gapped clusters); `inline` is a few files
    shipped with rdmaprov itself.
    """

    kind: str
    url: str = ""
    ref: str = ""
    path: str = ""
    sha256: str = ""
    files: tuple[tuple[str, str], ...] = ()
    setting: str = ""  # the inventory key that declares it, for error messages

    def identity(self) -> dict[str, str]:
        """What makes two sources the same: a local file counts by its content."""
        if self.kind == "inline":
            return {"kind": "inline", "files": hashlib.sha256(json.dumps(self.files).encode()).hexdigest()}
        if self.kind == "file":
            try:
                return {"kind": "file", "sha256": self.sha256 or file_sha256(self.path)}
            except OSError as exc:
                raise ValueError(
                    f"cannot read {self.path} ({self.setting or 'source'}): {exc.strerror}; give an existing local "
                    "tarball"
                ) from None
        return {"kind": self.kind, "url": self.url, "ref": self.ref, "sha256": self.sha256}


@dataclass(frozen=True)
class BuildSpec:
    """One build as a node needs it; `inputs` are the platform facts its output depends on."""

    name: str
    version: str
    source: Source
    script: str
    prefix: str
    inputs: tuple[tuple[str, str], ...] = ()
    after_install: str = ""

    @cached_property
    def key(self) -> str:
        """Computed once per spec: placement asks for it on every host for every peer."""
        text = json.dumps(
            [self.name, self.version, self.source.identity(), self.script, sorted(self.inputs)], sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def dirname(self) -> str:
        """The versioned install directory under the prefix."""
        return f"{self.version}-{self.key[:8]}"

    @property
    def archive(self) -> str:
        return f"{self.name}-{self.version}-{self.key}.tar.gz"

    @property
    def remote_archive(self) -> str:
        return f"{ARTIFACT_DIR}/{self.archive}"

    @property
    def workdir(self) -> str:
        return f"{WORK_ROOT}/{self.name}-{self.key}"


S = TypeVar("S", bound=RecipeSettings)


@dataclass(frozen=True)
class Recipe(Generic[S]):
    """How settings and facts make a node's BuildSpec (None: nothing to build on that node)."""

    name: str
    make: Callable[[S, OsInfo, list[Gpu]], BuildSpec | None]
    uses_gpus: bool = False


_FILE_SHA: dict[tuple[str, int, float], str] = {}


def file_sha256(path: str) -> str:
    """sha256 of a local file, remembered while it is unchanged (a source tarball is read once a run)."""
    stat = Path(path).stat()
    memo = (path, stat.st_size, stat.st_mtime)
    if memo not in _FILE_SHA:
        _FILE_SHA[memo] = sha256_of(path)
    return _FILE_SHA[memo]


def sha256_of(path: str | Path) -> str:
    """sha256 of a file, read in blocks (archives can be hundreds of MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
