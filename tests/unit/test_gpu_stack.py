"""The GPU half of the node stack at operation level, per distro, given the nodes' facts: NVIDIA
driver and CUDA, NCCL and nccl-tests builds (the make lines and NVCC_GENCODE), NCCL packages,
eRDMA and the AIACC plugin; no commands on converged nodes; clear errors on bad input."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from rdmaprov.deploys.erdma import ERDMA_PACKAGES
from rdmaprov.deploys.nccl import (
    NCCL_RECIPE,
    NcclSettings,
    NcclTestsSettings,
    nccl_build,
    nccl_packages,
    nccl_tests_build,
    node_gencode,
)
from rdmaprov.deploys.repository import yum_section
from rdmaprov.engine.run_context import context_of
from rdmaprov.facts.builds import BuildInstalled, CommandWorks, InstalledBuild, KeptArchive
from rdmaprov.facts.gpu import DriverState, Gpus, NvidiaDriver, parse_driver_state
from rdmaprov.facts.rdma import ErdmaProvider
from rdmaprov.facts.system import InstalledPackages, Os, PackageVersions
from rdmaprov.nvidia import (
    arch_from_compute_cap,
    arch_problem,
    cuda_repo,
    driver_matches,
    driver_problem,
    gencode,
    toolkit_package,
)
from rdmaprov.operations.builds import (
    artifact_broadcast,
    artifact_built,
    artifact_fetched,
    artifact_installed,
    declare,
)
from rdmaprov.operations.erdma import AIACC_PACKAGE, aiacc_plugin, erdma_userspace
from rdmaprov.operations.gpu import nvidia_driver
from rdmaprov.operations.packages import packages
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import parse_package_versions
from tests.support.ops import APT_INSTALL, FactState, commands, os_fact, run_notes

A100 = Gpu("NVIDIA A100-SXM4-80GB", "8.0", "535.129.03")
H100 = Gpu("NVIDIA H100 80GB HBM3", "9.0", "535.129.03")
DISTROS = ["ubuntu-20.04", "ubuntu-22.04", "rhel-8.9", "rocky-9.3", "alinux-3"]
NCCL = NcclSettings("2.18.3-1", {"kind": "git"}, None, "sm_80", "12.2", "/opt/nccl", False)


def _tests(nccl: NcclSettings = NCCL, **tests: str) -> NcclTestsSettings:
    return NcclTestsSettings(nccl, {"prefix": "/opt/nccl-tests", **tests}, None, "", "")


# --- what rdmaprov knows about NVIDIA's stack -------------------------------------------------


def test_architecture_and_gencode_from_the_gpus_compute_capability():
    assert arch_from_compute_cap("8.0") == "sm_80" and arch_from_compute_cap("9.0") == "sm_90"
    assert gencode("sm_80") == "-gencode=arch=compute_80,code=sm_80"
    assert gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"


@pytest.mark.parametrize(
    ("arch", "cuda", "why"),
    [
        ("sm_80", "12.2", None),
        ("sm_90", "11.4", "sm_90 needs CUDA 11.8 or newer, not 11.4"),
        ("sm_70", "13.0", "CUDA 13.0 and newer no longer build for sm_70; use CUDA 12.x"),
        ("sm_99", "12.2", "unknown GPU architecture sm_99"),
    ],
)
def test_architecture_against_cuda(arch, cuda, why):
    found = arch_problem(arch, cuda)
    assert (found is None) if why is None else found.startswith(why)


@pytest.mark.parametrize(
    ("driver", "cuda", "ok"),
    [
        ("535.129.03", "12.2", True),
        ("535", "12.2", True),
        ("525", "12.4", True),
        ("470.82.01", "12.2", False),
        ("525.60.12", "12.0", False),
        ("450.80.02", "11.8", True),
        ("560", "13.0", False),
    ],
)
def test_driver_against_cuda_minor_version_compatibility(driver, cuda, ok):
    assert (driver_problem(driver, cuda) is None) == ok


def test_declared_driver_matches_branch_or_exact_version():
    assert driver_matches("535", "535.129.03") and driver_matches("535.129.03", "535.129.03")
    assert (
        not driver_matches("535.129.03", "535.104.05")
        and not driver_matches("550", "535.129.03")
        and not driver_matches("535", "")
    )


@pytest.mark.parametrize(
    ("distro", "repo", "key"),
    [
        ("ubuntu-20.04", "ubuntu2004", "3bf863cc.pub"),
        ("ubuntu-22.04", "ubuntu2204", "3bf863cc.pub"),
        ("rhel-8.9", "rhel8", "D42D0685.pub"),
        ("rocky-9.3", "rhel9", "D42D0685.pub"),
        ("alinux-3", "rhel8", "D42D0685.pub"),
    ],
)
def test_cuda_repository_per_distro(distro, repo, key):
    found = cuda_repo(os_fact(distro))
    assert found.url == f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/x86_64"
    assert found.key_url == f"{found.url}/{key}"
    assert cuda_repo(os_fact(distro), "http://mirror.local/cuda/").url == f"http://mirror.local/cuda/{repo}/x86_64"


def test_yum_repository_entry():
    assert yum_section(
        "rdmaprov-cuda", "CUDA repository", "https://x/rhel9/x86_64", "https://x/rhel9/x86_64/D42D0685.pub"
    ) == (
        "[rdmaprov-cuda]\nname=CUDA repository\nbaseurl=https://x/rhel9/x86_64\nenabled=1\ngpgcheck=1\ngpgkey=https://x/rhel9/x86_64/D42D0685.pub\n"
    )


# --- driver and toolkit ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("distro", "driver", "expected"),
    [
        ("ubuntu-20.04", "535.129.03", APT_INSTALL + "cuda-drivers-535=535.129.03-1"),
        ("ubuntu-22.04", "535", APT_INSTALL + "cuda-drivers-535"),
        (
            "rhel-8.9",
            "535.129.03",
            "dnf -y module enable nvidia-driver:535-dkms && dnf -y install cuda-drivers-535.129.03",
        ),
        ("rocky-9.3", "550", "dnf -y module install nvidia-driver:550-dkms"),
        ("alinux-3", "535", "dnf -y module install nvidia-driver:535-dkms"),
    ],
)
def test_driver_install_per_distro_owes_a_reboot(distro, driver, expected):
    facts = {Os: os_fact(distro), NvidiaDriver: DriverState(installed="525.147.05", loaded="525.147.05")}
    out, notes = run_notes(nvidia_driver, facts, version=driver)
    assert out == [expected]
    assert notes.reboots["node1"] == [
        f"NVIDIA driver 525.147.05 → {driver}: the new kernel module loads at the next boot"
    ]


def test_driver_converged_changes_nothing_but_a_stale_module_still_owes_a_reboot():
    converged = {Os: os_fact("ubuntu-22.04"), NvidiaDriver: DriverState("535.129.03", "535.129.03")}
    out, notes = run_notes(nvidia_driver, converged, version="535.129.03")
    assert out == [] and notes.reboots == {}
    stale = {Os: os_fact("ubuntu-22.04"), NvidiaDriver: DriverState("535.129.03", "525.147.05")}
    out, notes = run_notes(nvidia_driver, stale, version="535")
    assert out == [] and notes.reboots["node1"] == [
        "NVIDIA driver 535.129.03 is installed but 525.147.05 is loaded: reboot to load it"
    ]


def test_nodes_without_gpus_get_no_driver_command():
    assert commands(nvidia_driver, {Os: os_fact("arch")}, version=None) == []


def test_driver_state_parser():
    assert parse_driver_state(["installed 535.129.03", "loaded "]) == DriverState("535.129.03", "")


@pytest.mark.parametrize("distro", DISTROS)
def test_cuda_toolkit_package(distro):
    os_info = os_fact(distro)
    wanted = {"debian": [toolkit_package("12.2")], "rhel": [toolkit_package("12.2")]}
    expected = APT_INSTALL + "cuda-toolkit-12-2" if os_info.family == "debian" else "dnf install -y cuda-toolkit-12-2"
    assert commands(packages, {Os: os_info, InstalledPackages: set()}, by_family=wanted) == [expected]
    assert commands(packages, {Os: os_info, InstalledPackages: {"cuda-toolkit-12-2"}}, by_family=wanted) == []


# --- NCCL from NVIDIA's packages --------------------------------------------------------------


@pytest.mark.parametrize(
    ("distro", "expected"),
    [
        ("ubuntu-22.04", APT_INSTALL + "libnccl2=2.18.3-1+cuda12.2 libnccl-dev=2.18.3-1+cuda12.2"),
        ("rocky-9.3", "dnf install -y libnccl-2.18.3-1+cuda12.2 libnccl-devel-2.18.3-1+cuda12.2"),
    ],
)
def test_nccl_packages_pinned_to_the_declared_version(distro, expected):
    names, pins = nccl_packages(replace(NCCL, source={"kind": "packages"}))
    os_info = os_fact(distro)
    assert commands(packages, {Os: os_info, InstalledPackages: set()}, by_family=names, versions=pins) == [expected]
    installed = set(names[os_info.family])
    at_version = {
        Os: os_info,
        InstalledPackages: installed,
        PackageVersions: {n: "2.18.3-1+cuda12.2" for n in installed},
    }
    assert commands(packages, at_version, by_family=names, versions=pins) == []
    older = {Os: os_info, InstalledPackages: installed, PackageVersions: {n: "2.16.5-1+cuda12.2" for n in installed}}
    assert commands(packages, older, by_family=names, versions=pins) == [expected]


def test_package_versions_parser_on_dpkg_and_rpm_lines():
    text = "ii  libnccl2 2.18.3-1+cuda12.2\nrc  libnccl-dev 2.16.5-1+cuda12.0\nii libnccl 2.18.3-1+cuda12.2\n"
    assert parse_package_versions(text) == {"libnccl2": "2.18.3-1+cuda12.2", "libnccl": "2.18.3-1+cuda12.2"}


# --- NCCL and nccl-tests from source ----------------------------------------------------------


@pytest.mark.parametrize("distro", DISTROS)
def test_nccl_make_line_per_distro(distro):
    spec = nccl_build(NCCL, os_fact(distro), [A100] * 8)
    assert (
        spec.script.splitlines()[0]
        == 'make -j"$JOBS" src.build CUDA_HOME=/usr/local/cuda-12.2 NVCC_GENCODE="-gencode=arch=compute_80,code=sm_80"'
    )
    assert spec.source.url == "https://github.com/NVIDIA/nccl.git" and spec.source.ref == "v2.18.3-1"
    assert spec.prefix == "/opt/nccl" and spec.dirname.startswith("2.18.3-1-") and spec.after_install == "ldconfig"


@pytest.mark.parametrize(
    ("distro", "mpi_home", "prepare"),
    [
        ("ubuntu-20.04", "/usr/lib/x86_64-linux-gnu/openmpi", ""),
        ("ubuntu-22.04", "/usr/lib/x86_64-linux-gnu/openmpi", ""),
        (
            "rhel-8.9",
            "$PWD/.mpi",
            "mkdir -p .mpi && ln -sfn /usr/include/openmpi-x86_64 .mpi/include && ln -sfn /usr/lib64/openmpi/lib "
            ".mpi/lib",
        ),
        (
            "rocky-9.3",
            "$PWD/.mpi",
            "mkdir -p .mpi && ln -sfn /usr/include/openmpi-x86_64 .mpi/include && ln -sfn /usr/lib64/openmpi/lib "
            ".mpi/lib",
        ),
        (
            "alinux-3",
            "$PWD/.mpi",
            "mkdir -p .mpi && ln -sfn /usr/include/openmpi-x86_64 .mpi/include && ln -sfn /usr/lib64/openmpi/lib "
            ".mpi/lib",
        ),
    ],
)
def test_nccl_tests_make_line_is_mpi_against_the_built_nccl(distro, mpi_home, prepare):
    spec = nccl_tests_build(_tests(replace(NCCL, arch=None)), os_fact(distro), [H100] * 8)
    lines = spec.script.splitlines()
    make = (
        f'make -j"$JOBS" MPI=1 MPI_HOME={mpi_home} NCCL_HOME=/opt/nccl/current CUDA_HOME=/usr/local/cuda-12.2 '
        'NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"'
    )
    assert lines == ([prepare] if prepare else []) + [make, 'mkdir -p "$STAGE/bin" && cp build/*_perf "$STAGE/bin/"']
    assert spec.source.url == "https://github.com/NVIDIA/nccl-tests.git" and spec.version == "2.13.12"


def test_build_identity_changes_with_what_changes_the_output():
    base = nccl_build(NCCL, os_fact("ubuntu-22.04"), [])
    assert nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100]).key == base.key  # gpu.arch decides, not facts
    others = [
        nccl_build(replace(NCCL, version="2.19.3-1"), os_fact("ubuntu-22.04"), []),
        nccl_build(replace(NCCL, arch="sm_90"), os_fact("ubuntu-22.04"), []),
        nccl_build(replace(NCCL, cuda="12.4"), os_fact("ubuntu-22.04"), []),
        nccl_build(NCCL, os_fact("ubuntu-20.04"), []),
    ]
    assert len({spec.key for spec in others} | {base.key}) == 5
    assert (
        nccl_tests_build(_tests(), os_fact("ubuntu-22.04"), []).key
        != nccl_tests_build(_tests(replace(NCCL, version="2.19.3-1")), os_fact("ubuntu-22.04"), []).key
    )


def test_gencode_from_inventory_wins_then_arch_then_facts():
    assert (
        node_gencode(replace(NCCL, gencode="-gencode=arch=compute_86,code=sm_86"), [H100])
        == "-gencode=arch=compute_86,code=sm_86"
    )
    assert node_gencode(NCCL, [H100]) == gencode("sm_80")
    assert node_gencode(replace(NCCL, arch=None), [H100, H100]) == gencode("sm_90")


@pytest.mark.parametrize(
    ("cuda", "gpus", "message"),
    [
        ("12.2", [], "cannot tell the GPUs' architecture: nvidia-smi reports no GPU"),
        ("12.2", [Gpu("NVIDIA Future GPU", "13.5", "600.1")], "unknown GPU architecture sm_135"),
        ("11.4", [H100], "sm_90 needs CUDA 11.8 or newer, not 11.4 (GPUs: NVIDIA H100 80GB HBM3)"),
    ],
)
def test_unknown_or_unbuildable_architecture_is_a_clear_error(cuda, gpus, message):
    with pytest.raises(ValueError, match=r"set gpu\.arch") as error:
        node_gencode(replace(NCCL, arch=None, cuda=cuda), gpus)
    assert message in str(error.value)


def _cluster(installed: dict[str, InstalledBuild], distro: str = "ubuntu-22.04") -> dict:
    return {
        Os: {h: os_fact(distro) for h in installed},
        Gpus: {h: [A100] for h in installed},
        BuildInstalled: installed,
    }


def _state(installed: dict[str, InstalledBuild], executing: bool = False) -> FactState:
    hosts = list(installed)
    state = FactState(_cluster(installed), hosts, {"NCCL": {h: NCCL for h in hosts}}, executing)
    context_of(state).recipes["nccl"] = NCCL_RECIPE  # type: ignore[arg-type]
    return state


def _build(
    op, host: str, installed: dict[str, InstalledBuild], facts: dict | None = None, executing: bool = False
) -> list[str]:
    own = {Os: os_fact("ubuntu-22.04"), Gpus: [A100], BuildInstalled: installed[host], **(facts or {})}
    out, _ = run_notes(
        op, own, host=host, state=_state(installed, executing), recipe="nccl", slot="NCCL", settings=NCCL
    )
    return out


def test_nccl_static_library_is_left_out_of_the_build_unless_asked_for(tmp_path):
    """libnccl_static.a is 80 of a build's ~128 MB and no program loads it: it is not shipped to
    every node unless nccl.static_library asks (for linking statically on the nodes)."""
    from rdmaprov.inventory import load_inventory

    default = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    wanted = nccl_build(replace(NCCL, static_library=True), os_fact("ubuntu-22.04"), [A100])
    assert default.script.splitlines()[-1] == 'rm -f "$STAGE"/lib/libnccl_static.a'
    assert "libnccl_static" not in wanted.script and wanted.key != default.key
    path = tmp_path / "inv.yaml"
    path.write_text("cluster: {name: c}\nhosts:\n  a: {vars: {nccl: {static_library: true}}}\n  b: {}\n")
    hosts = load_inventory(str(path), require_files=False).hosts
    assert hosts["a"].node.nccl.static_library is True and hosts["b"].node.nccl.static_library is False


def test_nccl_is_built_on_the_first_node_only_and_shipped_to_the_others(artifact_store):
    spec = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    bare = {h: InstalledBuild() for h in ("gpu1", "gpu2", "gpu3")}
    built = _build(artifact_built, "gpu1", bare, {CommandWorks: (True, "")})
    assert built[0] == f"rm -rf {spec.workdir}/src && mkdir -p {spec.workdir}/src"
    script = built[1].splitlines()
    assert "git -C src fetch -q --depth 1 https://github.com/NVIDIA/nccl.git v2.18.3-1 || " in script[5]
    assert script[10] == spec.script.splitlines()[0] and spec.archive in script[-2] and "sha256sum" in script[-2]
    assert _build(artifact_built, "gpu2", bare) == [] and _build(artifact_built, "gpu3", bare) == []
    fetched = _build(artifact_fetched, "gpu1", bare)
    assert fetched == [
        f"download {spec.remote_archive} to {artifact_store}/{spec.archive}.part",
        f"download {spec.remote_archive}.sha256 to {artifact_store}/{spec.archive}.sha256.part",
        f"call _commit('{spec.archive}',)",
    ]
    shipped = _build(artifact_installed, "gpu2", bare)
    assert shipped[1:3] == [
        f"upload {spec.remote_archive} from {artifact_store}/{spec.archive}",
        f"upload {spec.remote_archive}.sha256 from {artifact_store}/{spec.archive}.sha256",
    ]
    install = shipped[3].splitlines()
    assert install[2].startswith(f"sha256sum -c --quiet {spec.archive}.sha256 || ")
    assert install[-2].endswith("/opt/nccl/current") and install[-1] == "ldconfig"  # the node keeps its copy
    # the builder installs its own archive and keeps it (no upload)
    assert not any(c.startswith("upload") for c in _build(artifact_installed, "gpu1", bare))


def test_converged_nodes_build_fetch_and_install_nothing():
    spec = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    done = {h: InstalledBuild(spec.key, "ab" * 32, spec.dirname) for h in ("gpu1", "gpu2")}
    for op in (artifact_built, artifact_fetched, artifact_installed):
        assert _build(op, "gpu1", done) == [] and _build(op, "gpu2", done) == []


def test_a_node_joining_later_gets_the_kept_build_without_a_rebuild():
    spec = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    cluster = {"gpu1": InstalledBuild(spec.key, "ab" * 32, spec.dirname), "gpu2": InstalledBuild()}
    assert _build(artifact_built, "gpu1", cluster, {KeptArchive: "ab" * 32}) == []  # kept from the first build
    assert len(_build(artifact_fetched, "gpu1", cluster)) == 3


def test_unreachable_source_fails_before_building_and_names_host_and_fix():
    bare = {h: InstalledBuild() for h in ("gpu1", "gpu2")}
    with pytest.raises(ValueError) as error:
        _build(
            artifact_built,
            "gpu1",
            bare,
            {
                CommandWorks: (
                    False,
                    "fatal: unable to access 'https://github.com/NVIDIA/nccl.git/': Could not resolve host: github.com",
                )
            },
        )
    assert str(error.value).startswith(
        "gpu1 cannot fetch https://github.com/NVIDIA/nccl.git v2.18.3-1 (fatal: unable to access"
    )
    assert "fix nccl.source" in str(error.value) and "local tarball (kind file)" in str(error.value)


def test_install_without_a_build_fails_this_host_saying_which_builder_failed():
    bare = {h: InstalledBuild() for h in ("gpu1", "gpu2")}
    # while applying, an operation's error becomes a failing command carrying the reason (not a crash of the run)
    assert _build(artifact_installed, "gpu2", bare, executing=True) == [
        "echo 'rdmaprov: nccl 2.18.3-1 is not available to install: its build on gpu1 failed or did not run (see "
        "gpu1'\"'\"'s result)' >&2; exit 1"
    ]


# --- eRDMA and the AIACC plugin ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("distro", "expected"),
    [
        ("ubuntu-20.04", APT_INSTALL + " ".join(ERDMA_PACKAGES["debian"])),
        ("ubuntu-22.04", APT_INSTALL + " ".join(ERDMA_PACKAGES["debian"])),
        (
            "alinux-3",
            f"dnf install -y {' '.join(ERDMA_PACKAGES['rhel'])} && dnf -y upgrade {' '.join(ERDMA_PACKAGES['rhel'])}",
        ),
        (
            "rocky-9.3",
            f"dnf install -y {' '.join(ERDMA_PACKAGES['rhel'])} && dnf -y upgrade {' '.join(ERDMA_PACKAGES['rhel'])}",
        ),
    ],
)
def test_erdma_userspace_comes_from_the_erdma_repository(distro, expected):
    os_info = os_fact(distro)
    installed = set(ERDMA_PACKAGES[os_info.family])
    # distro rdma-core without the erdma provider is upgraded
    assert commands(
        erdma_userspace, {Os: os_info, InstalledPackages: installed, ErdmaProvider: False}, by_family=ERDMA_PACKAGES
    ) == [expected]
    assert (
        commands(
            erdma_userspace, {Os: os_info, InstalledPackages: installed, ErdmaProvider: True}, by_family=ERDMA_PACKAGES
        )
        == []
    )
    assert commands(erdma_userspace, {Os: os_fact("arch")}, by_family={}) == []


@pytest.mark.parametrize(
    ("distro", "url", "install"),
    [
        (
            "ubuntu-20.04",
            "https://ali-perseus-release.oss-cn-huhehaote.aliyuncs.com/ACSpeed/nccl-plugin/deb/aiacc-nccl-plugin-1.0.2.deb",
            "dpkg -i /var/cache/rdmaprov/aiacc-nccl-plugin.deb && rm -f /var/cache/rdmaprov/aiacc-nccl-plugin.deb",
        ),
        (
            "alinux-3",
            "https://ali-perseus-release.oss-cn-huhehaote.aliyuncs.com/ACSpeed/nccl-plugin/rpm/aiacc-nccl-plugin-1.0.2.rpm",
            "rpm -Uvh --replacepkgs /var/cache/rdmaprov/aiacc-nccl-plugin.rpm && rm -f "
            "/var/cache/rdmaprov/aiacc-nccl-plugin.rpm",
        ),
    ],
)
def test_aiacc_plugin_download_and_install(distro, url, install):
    facts = {Os: os_fact(distro), PackageVersions: {}}
    out = commands(aiacc_plugin, facts, source=url, version="1.0.2")
    assert out[0] == "mkdir -p /var/cache/rdmaprov"
    assert (
        out[1].startswith(f"curl -fsSL --retry 3 -o /var/cache/rdmaprov/{AIACC_PACKAGE}.")
        and "cannot download" in out[1]
    )
    assert out[2] == install
    assert (
        commands(
            aiacc_plugin,
            {Os: os_fact(distro), PackageVersions: {AIACC_PACKAGE: "1.0.2-1"}},
            source=url,
            version="1.0.2",
        )
        == []
    )


def test_aiacc_plugin_from_a_local_file_is_uploaded(tmp_path):
    package = tmp_path / "aiacc-nccl-plugin-1.0.2.deb"
    out = commands(
        aiacc_plugin, {Os: os_fact("ubuntu-22.04"), PackageVersions: {}}, source=str(package), version="1.0.2"
    )
    assert out[1] == f"upload /var/cache/rdmaprov/{AIACC_PACKAGE}.deb from {package}"


def test_declared_builds_are_registered_per_slot():
    state = FactState(hosts=["a", "b"])
    from pyinfra.context import ctx_host, ctx_state

    from tests.support.ops import FactHost

    with ctx_state.use(state):
        for name in ("a", "b"):
            with ctx_host.use(FactHost(name, {})):
                declare(NCCL_RECIPE, "NCCL", NCCL if name == "a" else None)
    assert context_of(state).builds == {"NCCL": {"a": NCCL}}  # type: ignore[arg-type]
    assert context_of(state).recipes == {"nccl": NCCL_RECIPE}  # type: ignore[arg-type]


# --- bad input in the inventory ---------------------------------------------------------------

ERDMA_INVENTORY = """cluster:
  name: t
defaults:
  fabric: erdma
  gpu: {{count: 8, cuda_version: "12.2", driver_version: "{driver}", arch: {arch}}}
  erdma:
    aiacc_plugin: aiacc-nccl-plugin-1.0.2.deb
  nccl:
    version: {nccl}
hosts:
  node1: {{}}
  node2: {{}}
"""


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"nccl": "2.18.3-1"},
            ":9:14: defaults.nccl.version: NCCL 2.18.3-1 is outside what the AIACC NCCL plugin 1.0.2 supports "
            "(2.8–2.16) (hosts node1, node2) "
            "(fix: use NCCL 2.8.x to 2.16.x on eRDMA nodes (e.g. 2.16.5-1), or remove erdma.aiacc_plugin)",
        ),
        ({"arch": "sm_99"}, ":5:77: defaults.gpu.arch: unknown GPU architecture sm_99"),
        (
            {"driver": "470.82.01"},
            ":5:57: defaults.gpu.driver_version: driver 470.82.01 cannot run CUDA 12.2: CUDA 12.x needs driver "
            "525.60.13 or newer (hosts node1, node2) "
            "(fix: raise gpu.driver_version or lower gpu.cuda_version)",
        ),
    ],
)
def test_inventory_that_does_not_fit_together_is_refused_naming_place_hosts_and_fix(tmp_path, values, expected):
    from rdmaprov.errors import UserError
    from rdmaprov.inventory import load_inventory

    path = tmp_path / "erdma.yaml"
    path.write_text(ERDMA_INVENTORY.format(**{"nccl": "2.16.5-1", "arch": "sm_80", "driver": "535.161.08", **values}))
    with pytest.raises(UserError) as error:
        load_inventory(path, require_files=False)
    assert str(error.value).startswith(str(path) + expected)


def test_vendor_repository_files_for_cuda_and_erdma():
    from rdmaprov.deploys.repository import repository_files
    from rdmaprov.nvidia import cuda_repo

    cuda = cuda_repo(os_fact("ubuntu-22.04"))
    files = repository_files("rdmaprov-cuda", "CUDA repository", "debian", f"{cuda.url}/ /", None, cuda.key_url, "KEY")
    assert files == {
        "/etc/apt/keyrings/rdmaprov-cuda.asc": "KEY",
        "/etc/apt/sources.list.d/rdmaprov-cuda.list": "deb [signed-by=/etc/apt/keyrings/rdmaprov-cuda.asc] "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /\n",
        "/etc/yum.repos.d/rdmaprov-cuda.repo": None,
    }
    rhel = cuda_repo(os_fact("rocky-9.3"))
    files = repository_files("rdmaprov-cuda", "CUDA repository", "rhel", None, rhel.url, rhel.key_url, None)
    assert files["/etc/pki/rpm-gpg/RPM-GPG-KEY-rdmaprov-cuda"] is None  # dnf fetches a key URL itself
    assert (
        "gpgkey=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub"
        in files["/etc/yum.repos.d/rdmaprov-cuda.repo"]
    )
    mirror = repository_files(
        "rdmaprov-cuda", "CUDA repository", "rhel", None, "http://mirror/cuda/rhel9/x86_64", "keys/cuda.pub", "KEY"
    )
    assert (
        mirror["/etc/pki/rpm-gpg/RPM-GPG-KEY-rdmaprov-cuda"] == "KEY"
        and "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rdmaprov-cuda" in mirror["/etc/yum.repos.d/rdmaprov-cuda.repo"]
    )
    focal = repository_files(
        "rdmaprov-erdma",
        "eRDMA repository",
        "debian",
        "https://mirrors.aliyun.com/erdma/apt/ubuntu focal/erdma main",
        None,
        "https://mirrors.aliyun.com/erdma/GPGKEY",
        "KEY",
        apt_arch="amd64",
    )
    assert focal["/etc/apt/sources.list.d/rdmaprov-erdma.list"] == (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/rdmaprov-erdma.asc] https://mirrors.aliyun.com/erdma/apt/ubuntu "
        "focal/erdma main\n"
    )
    nothing = repository_files("rdmaprov-erdma", "eRDMA repository", "debian", None, None, None, None)
    assert set(nothing.values()) == {None}


def _slurm_shipping(artifact_store, tmp_path, slurm_ready: bool) -> tuple[dict[str, list[str]], str]:
    """artifact_broadcast, then artifact_installed, on each of three nodes of a Slurm cluster where
    gpu1 built and keeps NCCL and the control machine's cache holds it: {host: commands of both},
    and the archive."""
    from rdmaprov.engine.board import Board
    from rdmaprov.inventory import load_inventory

    spec = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    sha = "ab" * 32
    (artifact_store / spec.archive).write_bytes(b"archive")
    (artifact_store / f"{spec.archive}.sha256").write_text(f"{sha}  {spec.archive}\n")
    cluster = {"gpu1": InstalledBuild(spec.key, sha, spec.dirname), "gpu2": InstalledBuild(), "gpu3": InstalledBuild()}
    kept = {"gpu1": sha, "gpu2": "", "gpu3": ""}
    state = _state(cluster)
    run = context_of(state)
    run.cluster_facts.values.update({KeptArchive: kept, CommandWorks: {"gpu1": (slurm_ready, "")}})
    run.board = Board()
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster: {name: c, slurm: {enabled: true, controller: gpu1}}\nhosts: {gpu1: {}, gpu2: {}, gpu3: {}}\n"
    )
    run.inventory = load_inventory(str(path), require_files=False)
    out: dict[str, list[str]] = {name: [] for name in cluster}
    for op in (artifact_broadcast, artifact_installed):
        for name in cluster:
            own = {Os: os_fact("ubuntu-22.04"), Gpus: [A100], BuildInstalled: cluster[name], KeptArchive: kept[name]}
            done, _ = run_notes(op, own, host=name, state=state, recipe="nccl", slot="NCCL", settings=NCCL)
            out[name] += done
    return out, spec.archive


def test_under_slurm_the_holder_sends_the_archive_by_sbcast_and_the_ssh_tree_stays_the_fallback(
    artifact_store, tmp_path
):
    out, archive = _slurm_shipping(artifact_store, tmp_path, slurm_ready=True)
    # gpu1 holds it (installed and current): its only work is the broadcast to the nodes lacking it
    [send] = out["gpu1"]
    assert send.startswith("call _broadcast(") and f"Broadcast(archive='{archive}', sender='gpu1', " in send
    assert send.endswith("nodes=('gpu2', 'gpu3')))")
    for node in ("gpu2", "gpu3"):  # each takes Slurm's copy, else the tree's from gpu1
        assert "sources=('@sbcast', 'gpu1', '')" in out[node][0], out[node][0]
    # where Slurm cannot be used from the holder (not installed yet, controller down): the tree alone
    out, _ = _slurm_shipping(artifact_store, tmp_path, slurm_ready=False)
    assert out["gpu1"] == [] and "sources=('gpu1', '')" in out["gpu2"][0]


def test_the_broadcast_asks_slurm_for_the_nodes_at_once_and_sends_to_where_nodes_keep_archives():
    from rdmaprov.builds.scripts import broadcast_script
    from rdmaprov.operations.builds import Broadcast, Shipment

    spec = nccl_build(NCCL, os_fact("ubuntu-22.04"), [A100])
    script = broadcast_script(spec, ["gpu2", "gpu3"], "gpu", 3, "rdmaprov-ship-abc", 15)
    words = shlex.split(script)
    assert words[:9] == [
        "salloc",
        "--job-name=rdmaprov-ship-abc",
        "--partition=gpu",
        "--nodes=2",
        "--nodelist=gpu2,gpu3",
        "--immediate=15",
        "--time=3",
        "--quiet",
        "sh",
    ]
    archive = f"/var/cache/rdmaprov/artifacts/{spec.archive}"
    assert words[9:] == [
        "-c",
        f"srun --ntasks-per-node=1 mkdir -p /var/cache/rdmaprov/artifacts && sbcast --force {archive} {archive}.sbcast",
    ]
    broadcast = Broadcast(spec.archive, "gpu1", ("gpu2", "gpu3"))
    assert broadcast.shown() == f"send {spec.archive} to gpu2, gpu3 by Slurm's sbcast (each checks its sha256)"
    shown = Shipment(spec, ("@sbcast", "gpu1", ""), ("gpu1",), broadcast).shown()
    assert shown == (
        f"receive {spec.archive} from Slurm's sbcast from gpu1, else gpu1, else the control machine (sha256 checked)"
    )
