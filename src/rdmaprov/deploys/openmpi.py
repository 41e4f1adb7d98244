"""OpenMPI for the all_reduce gate and for users' jobs: from the distro, an existing prefix, or a
site build shipped as a tarball.

HPC-X and site builds live under a prefix; for `prefix` rdmaprov only checks that `bin/mpirun` is
there. An `archive` (an Open MPI install tree packed on any machine) goes the way of every build:
one node repacks it, the nodes pass it on, each unpacks it under <prefix>/<version>-<id> and
switches <prefix>/current, so every node runs the same MPI whatever its distro release ships
(Open MPI 4 and 5 cannot share a job). Either way the prefix goes on login shells' PATH; the gates
pass `--prefix` and the MPI's environment themselves, because non-interactive SSH shells read no
profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import deploy

from rdmaprov.builds.spec import BuildSpec, RecipeSettings, Source
from rdmaprov.deploys.builds import build_and_ship
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import MpiConfig
from rdmaprov.operations.builds import Recipe
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.mpi import mpirun_present
from rdmaprov.operations.packages import packages
from rdmaprov.packages import BUILD_TOOLS, OPENMPI
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import fail_command, sh_single

PROFILE = "/etc/profile.d/rdmaprov-mpi.sh"


def mpi_package_sets(mpi: MpiConfig) -> dict[str, list[str]]:
    """Distro OpenMPI plus the compilers mpicc needs; a shipped MPI needs the compilers alone
    (the gate's probe is built with its mpicc); nothing for an existing prefix install."""
    if mpi.source == "prefix":
        return {}
    return {family: (OPENMPI[family] if mpi.source == "distro" else []) + BUILD_TOOLS[family] for family in OPENMPI}


def render_profile(prefix: str, relocated: bool = False) -> str:
    """Login shells' PATH and LD_LIBRARY_PATH; a shipped MPI (`relocated`, unpacked elsewhere than
    it was built for) also needs OPAL_PREFIX there, which then holds for every Open MPI run from
    such a shell (another one must be run with `env -u OPAL_PREFIX`). An existing prefix install
    is where it was built: its profile leaves OPAL_PREFIX alone."""
    lines = ["# Managed by rdmaprov: OpenMPI installed under a prefix.\n"]
    if relocated:
        lines.append(f"export OPAL_PREFIX={sh_single(prefix)}\n")
    lines.append(f'export PATH={sh_single(prefix + "/bin")}:"$PATH"\n')
    lines.append(f"export LD_LIBRARY_PATH={sh_single(prefix + '/lib')}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n")
    return "".join(lines)


@dataclass(frozen=True)
class ArchiveSettings(RecipeSettings):
    """The site MPI's tarball (mpi.archive, its path made absolute) and where it installs."""

    path: str
    sha256: str
    version: str
    prefix: str

    @property
    def source(self) -> Source:
        """The tarball on the control machine, as a build's source."""
        return Source(kind="file", path=self.path, sha256=self.sha256, setting="mpi.archive")


def archive_build(settings: ArchiveSettings, os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    """The site MPI's tarball as a build: the builder checks it holds an MPI and repacks it. No
    platform input: the same tree goes to every node, of every release."""
    missing = fail_command(
        "the tarball in mpi.archive.path has no bin/mpirun at its top or in its one top folder",
        "pack the Open MPI install tree (its bin, lib and share folders)",
    )
    return BuildSpec(
        name="mpi",
        version=settings.version,
        source=settings.source,
        # root owns what root runs: the tarball's owners (a packer's uid) are not kept
        script=f'test -x bin/mpirun || {missing}\ncp -a . "$STAGE"/\nchown -R 0:0 "$STAGE" && chmod -R go-w "$STAGE"',
        prefix=settings.prefix,
    )


MPI_ARCHIVE = Recipe("mpi_archive", archive_build)


def archive_settings(ctx: NodeContext) -> ArchiveSettings | None:
    """The archive recipe's settings for this node (None when its MPI comes from elsewhere)."""
    mpi = ctx.node.mpi
    # an archive's root is never None (mpi.root raises when mpi.prefix is unset): the check is for its type
    if mpi.source != "archive" or mpi.archive is None or mpi.root is None:
        return None
    archive = mpi.archive
    return ArchiveSettings(ctx.local_path(archive.path), archive.sha256, archive.version, mpi.root)


def archive_identity(ctx: NodeContext) -> str:
    """The shipped MPI's content ('' for the others): programs linked against it (the probe,
    nccl-tests) are rebuilt when a new archive replaces it."""
    settings = archive_settings(ctx)
    if settings is None:
        return ""
    return settings.source.identity()["sha256"]


def linked_mpi(archive: str) -> tuple[tuple[str, str], ...]:
    """The build input a program linked against a shipped MPI adds (`archive`: its
    archive_identity, "" where the node's MPI is not shipped)."""
    return (("mpi archive", archive),) if archive else ()


@deploy("openmpi")
def openmpi(ctx: NodeContext) -> None:
    mpi = ctx.node.mpi
    prefix = mpi.install_prefix
    packages(name="OpenMPI packages", by_family=mpi_package_sets(mpi))
    if any(spec.node.mpi.source == "archive" for spec in ctx.inventory.hosts.values()):
        build_and_ship(ctx, MPI_ARCHIVE, "site MPI", archive_settings(ctx))
    # every host plans the same operations: pyinfra pairs them up across hosts by position
    mpirun_present(name="mpirun under prefix", prefix=prefix if mpi.source == "prefix" else None, source=mpi.source)
    profile = render_profile(prefix, relocated=mpi.source == "archive") if prefix else None
    managed_file(name="OpenMPI prefix on PATH", path=PROFILE, content=profile)
