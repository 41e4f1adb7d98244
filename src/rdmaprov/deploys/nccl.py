"""NCCL and nccl-tests on GPU nodes: built from source once per distinct build and shipped, or
NCCL from NVIDIA's packages (`nccl.source.kind: packages`).

A build's identity is its source, NCCL_GENCODE (from gpu.arch, nccl.gencode or the GPUs that
nvidia-smi reports), the CUDA version and the distro release: nodes that agree on all of these
share one build. nccl-tests is built with MPI=1 against that NCCL and the node's OpenMPI, and
its identity includes NCCL's, so a new NCCL rebuilds it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyinfra.api import deploy

from rdmaprov.builds.spec import BuildSpec, RecipeSettings, Source
from rdmaprov.deploys.builds import build_and_ship, platform
from rdmaprov.deploys.openmpi import archive_identity, linked_mpi
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import plain
from rdmaprov.nvidia import arch_from_compute_cap, arch_problem, cuda_home, gencode
from rdmaprov.operations.builds import Recipe
from rdmaprov.operations.files import managed_file
from rdmaprov.operations.packages import packages
from rdmaprov.packages import BUILD_TOOLS
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo
from rdmaprov.quoting import config_value, sh, sh_double

NCCL_GIT = "https://github.com/NVIDIA/nccl.git"
NCCL_TESTS_GIT = "https://github.com/NVIDIA/nccl-tests.git"
NCCL_TESTS_REF = "v2.13.12"
LDCONFIG = "/etc/ld.so.conf.d/rdmaprov-nccl.conf"
FETCH_TOOLS = {"debian": ["git", "curl", "ca-certificates"], "rhel": ["git", "curl", "ca-certificates"]}


@dataclass(frozen=True)
class NcclSettings(RecipeSettings):
    """What the NCCL recipe needs from a node's inventory (nccl.*, gpu.arch, gpu.cuda_version)."""

    version: str
    source: Mapping[str, Any]  # nccl.source as written, a file's path made absolute
    gencode: str | None
    arch: str | None
    cuda: str | None
    prefix: str
    static_library: bool

    @property
    def from_packages(self) -> bool:
        """NCCL comes from NVIDIA's packages rather than a build."""
        return self.source.get("kind") == "packages"


@dataclass(frozen=True)
class NcclTestsSettings(RecipeSettings):
    """What the nccl-tests recipe needs: the node's NCCL, nccl.tests as written, its MPI."""

    nccl: NcclSettings
    tests: Mapping[str, Any]
    mpi_prefix: str | None
    mpi_env: str  # ld finds libmpi's own libraries through LD_LIBRARY_PATH
    mpi_archive: str  # the shipped MPI's sha256, "" for the others


def node_gencode(settings: NcclSettings, gpus: list[Gpu]) -> str:
    """NVCC_GENCODE: the inventory's, else for gpu.arch, else for the GPUs nvidia-smi reports."""
    if settings.gencode:
        return settings.gencode
    archs = [settings.arch] if settings.arch else sorted({arch_from_compute_cap(g.compute_cap) for g in gpus})
    if not archs:
        raise ValueError(
            "cannot tell the GPUs' architecture: nvidia-smi reports no GPU (is the driver loaded? a reboot may be "
            "owed); set gpu.arch (e.g. sm_80) or nccl.gencode"
        )
    for arch in archs:
        why = arch_problem(arch, settings.cuda)
        if why:
            models = ", ".join(sorted({g.name for g in gpus})) or "declared in gpu.arch"
            raise ValueError(f"{why} (GPUs: {models}); set gpu.arch to a known architecture or nccl.gencode explicitly")
    return " ".join(gencode(arch) for arch in archs)


def nccl_source(settings: NcclSettings) -> Source:
    source = settings.source
    kind = source.get("kind", "git")
    if kind == "file":
        return Source("file", path=source["path"], sha256=source.get("sha256", ""), setting="nccl.source.path")
    if kind == "tarball":
        return Source("url", url=source["url"], sha256=source.get("sha256", ""), setting="nccl.source.url")
    return Source(
        "git",
        url=source.get("url") or NCCL_GIT,
        ref=source.get("ref") or f"v{settings.version}",
        setting="nccl.source",
    )


def _cuda(settings: NcclSettings) -> str:
    if not settings.cuda:
        raise ValueError("NCCL is compiled with CUDA: set gpu.cuda_version (e.g. 12.2)")
    return settings.cuda


def nccl_build(settings: NcclSettings, os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    cuda = _cuda(settings)
    code = node_gencode(settings, gpus)
    script = (
        f'make -j"$JOBS" src.build CUDA_HOME={sh(cuda_home(cuda))} NVCC_GENCODE={sh_double(code)}\n'
        'mkdir -p "$STAGE" && cp -a build/lib build/include "$STAGE"/'
    )
    if not settings.static_library:
        # 80 of a build's ~128 MB (H100), needed by no program at run time: not shipped to every node
        script += '\nrm -f "$STAGE"/lib/libnccl_static.a'

    return BuildSpec(
        name="nccl",
        version=settings.version,
        source=nccl_source(settings),
        script=script,
        prefix=settings.prefix,
        inputs=(platform(os_info), ("cuda", cuda), ("gencode", code)),
        after_install="ldconfig",
    )


def mpi_home_lines(settings: NcclTestsSettings, os_info: OsInfo) -> tuple[str, str]:
    """(MPI_HOME as a shell word, commands preparing it): RHEL's OpenMPI keeps headers outside its prefix."""
    if settings.mpi_prefix:
        return sh(settings.mpi_prefix), ""
    if os_info.family == "rhel":
        return (
            "$PWD/.mpi",
            "mkdir -p .mpi && ln -sfn /usr/include/openmpi-x86_64 .mpi/include && ln -sfn /usr/lib64/openmpi/lib "
            ".mpi/lib\n",
        )
    return "/usr/lib/x86_64-linux-gnu/openmpi", ""


def nccl_tests_build(settings: NcclTestsSettings, os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    nccl = settings.nccl
    cuda = _cuda(nccl)
    code = node_gencode(nccl, gpus)
    built = None if nccl.from_packages else nccl_build(nccl, os_info, gpus)
    nccl_home = sh(f"{nccl.prefix.rstrip('/')}/current" if built else "/usr")
    mpi_home, prepare = mpi_home_lines(settings, os_info)
    tests = settings.tests
    if tests.get("path"):
        source = Source("file", path=tests["path"], sha256=tests.get("sha256", ""), setting="nccl.tests.path")
    else:
        source = Source(
            "git", url=tests.get("url") or NCCL_TESTS_GIT, ref=tests.get("ref") or NCCL_TESTS_REF, setting="nccl.tests"
        )
    # The version names a directory: a ref such as release/2.13 keeps its last part.
    version = (tests.get("ref") or NCCL_TESTS_REF).rsplit("/", 1)[-1].lstrip("v") if not tests.get("path") else "local"
    script = (
        f'{prepare}{settings.mpi_env}make -j"$JOBS" MPI=1 MPI_HOME={mpi_home} NCCL_HOME={nccl_home} '
        f"CUDA_HOME={sh(cuda_home(cuda))} NVCC_GENCODE={sh_double(code)}\n"
        'mkdir -p "$STAGE/bin" && cp build/*_perf "$STAGE/bin/"'
    )
    identity = built.key if built else f"packages {nccl.version}"
    return BuildSpec(
        name="nccl-tests",
        version=version,
        source=source,
        script=script,
        prefix=tests["prefix"],
        inputs=(
            (platform(os_info), ("cuda", cuda), ("gencode", code), ("nccl", identity), ("mpi", mpi_home))
            + linked_mpi(settings.mpi_archive)
        ),
    )


NCCL_RECIPE = Recipe("nccl", nccl_build, uses_gpus=True)
NCCL_TESTS_RECIPE = Recipe("nccl_tests", nccl_tests_build, uses_gpus=True)


def nccl_settings(ctx: NodeContext) -> NcclSettings | None:
    """What the NCCL recipe needs from this node's inventory (None: NCCL is not wanted here)."""
    gpu, nccl = ctx.node.gpu, ctx.node.nccl
    if gpu is None or not nccl.version:
        return None
    source = plain(nccl.source)
    if source.get("path"):
        source["path"] = ctx.local_path(source["path"])
    return NcclSettings(
        nccl.version, source, nccl.gencode, gpu.arch, gpu.cuda_version, nccl.prefix, nccl.static_library
    )


def nccl_tests_settings(ctx: NodeContext, nccl: NcclSettings | None) -> NcclTestsSettings | None:
    tests = plain(ctx.node.nccl.tests)
    if nccl is None or not ctx.node.nccl.tests_enabled:
        return None
    if tests.get("path"):
        tests["path"] = ctx.local_path(tests["path"])
    tests.setdefault("prefix", "/opt/nccl-tests")
    return NcclTestsSettings(nccl, tests, ctx.node.mpi.install_prefix, ctx.node.mpi.site_env, archive_identity(ctx))


def nccl_packages(nccl: NcclSettings | None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """NVIDIA's NCCL packages at the declared version (built for the declared CUDA), with their pins."""
    if nccl is None or not nccl.from_packages:
        return {}, {}
    version = f"{nccl.version}+cuda{_cuda(nccl)}"
    names = {"debian": ["libnccl2", "libnccl-dev"], "rhel": ["libnccl", "libnccl-devel"]}
    return names, {name: version for family in names.values() for name in family}


@deploy("nccl")
def nccl(ctx: NodeContext) -> None:
    settings = nccl_settings(ctx)
    # The settings when NCCL is built from source, else None.
    source = settings if settings is not None and not settings.from_packages else None
    names, pins = nccl_packages(settings)
    packages(name="NCCL packages", by_family=names, versions=pins)
    tools = {family: BUILD_TOOLS[family] + FETCH_TOOLS[family] for family in BUILD_TOOLS}
    packages(name="NCCL build tools", by_family=tools if settings is not None else {})
    build_and_ship(ctx, NCCL_RECIPE, "NCCL", source)
    managed_file(
        name="NCCL on the library path",
        path=LDCONFIG,
        after_change="ldconfig",
        content="# Managed by rdmaprov: the current NCCL build.\n"
        f"{config_value(source.prefix.rstrip('/') + '/current/lib', 'nccl.prefix')}\n"
        if source is not None
        else None,
    )
    build_and_ship(ctx, NCCL_TESTS_RECIPE, "nccl-tests", nccl_tests_settings(ctx, settings))
