"""Facts about built artifacts on a node: what is installed under a prefix, what archive is kept."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rdmaprov.builds.spec import ARTIFACT_DIR, MARKER


@dataclass(frozen=True)
class InstalledBuild:
    """The build id found in one versioned directory, and where `current` points."""

    key: str | None = None
    sha256: str | None = None
    current: str | None = None


def parse_installed_build(lines: list[str]) -> InstalledBuild:
    """`marker KEY SHA` (absent when not installed) and `current TARGET` lines."""
    key = sha = current = None
    for line in lines:
        tag, _, rest = line.strip().partition(" ")
        if tag == "marker" and rest:
            parts = rest.split()
            key, sha = parts[0], (parts[1] if len(parts) > 1 else None)
        elif tag == "current" and rest.strip():
            current = rest.strip()
    return InstalledBuild(key, sha, current)


class BuildInstalled(FactBase[InstalledBuild]):
    """The marker of <prefix>/<dirname> and the target of <prefix>/current."""

    def command(self, prefix: str, dirname: str) -> str:
        root = prefix.rstrip("/")
        marker = shlex.quote(f"{root}/{dirname}/{MARKER}")
        return (
            f'[ -f {marker} ] && echo "marker $(cat {marker})"; echo "current $(readlink '
            f'{shlex.quote(root + "/current")} 2>/dev/null)"'
        )

    def process(self, output: list[str]) -> InstalledBuild:
        return parse_installed_build(output)

    @staticmethod
    def default() -> InstalledBuild:
        return InstalledBuild()


class KeptArchive(FactBase[str]):
    """The sha256 of a built archive kept in the node's artifact directory ('' when there is none)."""

    def command(self, archive: str) -> str:
        path = shlex.quote(f"{ARTIFACT_DIR}/{archive}")
        return f"[ -f {path} ] && cut -d' ' -f1 {path}.sha256 2>/dev/null || true"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""

    @staticmethod
    def default() -> str:
        return ""


class CommandWorks(FactBase[tuple[bool, str]]):
    """Whether a probe command succeeds, with its last error line: (ok, message)."""

    def command(self, probe: str) -> str:
        return f"out=$( ( {probe} ) 2>&1 ) && echo ok || {{ echo failed; printf '%s\\n' \"$out\" | tail -n 1; }}"

    def process(self, output: list[str]) -> tuple[bool, str]:
        if output and output[0].strip() == "ok":
            return True, ""
        return False, output[1].strip() if len(output) > 1 else "no output"

    @staticmethod
    def default() -> tuple[bool, str]:
        return False, "no output"
