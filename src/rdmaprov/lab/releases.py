"""The Debian releases a lab node can run, and how `lab up --release` names them.

Real clusters mix releases while they are upgraded one node group at a time; the lab boots
nodes of either release side by side so that rdmaprov is tried on such a mix before production.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdmaprov.errors import UserError


@dataclass(frozen=True)
class Release:
    codename: str  # the apt suite and os-release's VERSION_CODENAME
    version: str  # os-release's VERSION_ID
    # The suite the kernel comes from where it is not the release's own: Debian's backports carry
    # newer kernels, and sites run them for newer drivers (SoftRoCE moves between network
    # namespaces on trixie-backports' 7.3, not on 6.1 or 6.12: docs/training-jobs.md).
    kernel_suite: str = ""

    @property
    def name(self) -> str:
        """How --release and the lab's records name it: the codename, or the kernel's suite."""
        return self.kernel_suite or self.codename

    @property
    def title(self) -> str:
        kernel = f", {self.kernel_suite} kernel" if self.kernel_suite else ""
        return f"Debian {self.version} ({self.codename}{kernel})"


RELEASES = (Release("bookworm", "12"), Release("trixie", "13"), Release("trixie", "13", "trixie-backports"))
DEFAULT_RELEASE = RELEASES[0]
DEFAULT_NODES = 2
HELP = (
    "Debian release of the nodes: one for all of them, or one per node in order "
    f"(e.g. bookworm,trixie: node1 Debian 12, node2 Debian 13); "
    f"{', '.join(f'{r.codename} or {r.version}' for r in RELEASES if not r.kernel_suite)}, "
    f"{', '.join(r.name for r in RELEASES if r.kernel_suite)} (Debian 13 on its backports kernel)"
)


def find_release(word: str) -> Release:
    """A release by codename or version number (`trixie`, `13`, `debian13`), or by the suite of
    its kernel (`trixie-backports`)."""
    key = word.strip().lower().removeprefix("debian").strip("-")
    for release in RELEASES:
        if key == release.name or not release.kernel_suite and key in (release.codename, release.version):
            return release
    known = ", ".join(r.name if r.kernel_suite else f"{r.codename} ({r.version})" for r in RELEASES)
    raise UserError(f"--release {word!r}: the lab has no such Debian release (fix: use one of {known})")


def node_releases(spec: str, nodes: int | None) -> list[Release]:
    """Each node's release, node1 first. One release applies to every node; a list names one per
    node, and then also says how many nodes there are unless --nodes does."""
    words = [w.strip() for w in spec.split(",")]
    if not all(words):
        raise UserError(f"--release {spec!r}: an empty release name (fix: e.g. --release bookworm,trixie)")
    releases = [find_release(w) for w in words]
    if len(releases) == 1:
        return releases * (DEFAULT_NODES if nodes is None else nodes)
    if nodes is not None and nodes != len(releases):
        raise UserError(
            f"--release names {len(releases)} releases for --nodes {nodes}: give one release for every node, or "
            f"one per node in order (fix: e.g. --release {','.join(['bookworm'] * (nodes - 1) + ['trixie'])})"
            if nodes > 1
            else f"--release names {len(releases)} releases for --nodes {nodes} (fix: name one release)"
        )
    return releases
