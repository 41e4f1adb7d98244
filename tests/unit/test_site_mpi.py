"""A site MPI shipped as a tarball (mpi.source: archive): one build for nodes of every release,
checked and repacked by the builder, unpacked under <prefix>/current, relocated by OPAL_PREFIX,
and the programs linked against it rebuilt when it changes."""

from __future__ import annotations

import os
import subprocess

from rdmaprov.deploys.gate_tools import ProbeSettings, probe_build
from rdmaprov.deploys.openmpi import ArchiveSettings, archive_build, linked_mpi, mpi_package_sets, render_profile
from rdmaprov.inventory.config import MpiArchive, MpiConfig
from rdmaprov.parsers.system import OsInfo
from tests.unit.test_builds import build_for_real, install_for_real

BOOKWORM = OsInfo("debian", "12", "bookworm", "debian", "Debian GNU/Linux 12 (bookworm)")
TRIXIE = OsInfo("debian", "13", "trixie", "debian", "Debian GNU/Linux 13 (trixie)")


def _tarball(tmp_path, *files: str, owner: int = 1000):
    """An install tree in one top folder, packed as a site would, by a user (files: paths under it)."""
    top = tmp_path / "openmpi-4.1.4"
    for name in files:
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text('#!/bin/sh\necho "mpirun (Open MPI) 4.1.4 from $OPAL_PREFIX"\n')
        (top / name).chmod(0o755)
    tarball = tmp_path / "ompi.tar.gz"
    subprocess.run(
        ["tar", f"--owner={owner}", f"--group={owner}", "-C", str(tmp_path), "-czf", str(tarball), top.name], check=True
    )
    return tarball


def _settings(tarball, tmp_path) -> ArchiveSettings:
    return ArchiveSettings(str(tarball), "", "4.1.4", str(tmp_path / "opt" / "site-mpi"))


def test_one_build_serves_every_release_and_lands_under_current(tmp_path):
    tarball = _tarball(tmp_path, "bin/mpirun", "lib/libmpi.so.40")
    spec = archive_build(_settings(tarball, tmp_path), BOOKWORM, [])
    # the point of it: Debian 12 and 13 nodes get the same tree, so they share one build
    assert spec.key == archive_build(_settings(tarball, tmp_path), TRIXIE, []).key
    root = tmp_path / "node"
    built = build_for_real(spec, root)
    assert built.returncode == 0, built.stderr
    install_for_real(spec, root)
    current = tmp_path / "opt" / "site-mpi" / "current"
    assert current.resolve().name == spec.dirname and spec.dirname.startswith("4.1.4-")
    assert (current / "bin" / "mpirun").is_file() and (current / "lib" / "libmpi.so.40").is_file()
    if os.geteuid() == 0:  # as on a node: root owns what root runs, whoever packed the tarball
        for path in (current / "bin" / "mpirun", current / "lib", current / "bin"):
            assert (path.stat().st_uid, path.stat().st_gid, path.stat().st_mode & 0o022) == (0, 0, 0), path
    mpi = MpiConfig("archive", str(tmp_path / "opt" / "site-mpi") + "/", MpiArchive(str(tarball), "", "4.1.4"))
    assert mpi.install_prefix == str(current)
    ran = subprocess.run(["sh", "-c", f"{mpi.site_env}{current}/bin/mpirun"], capture_output=True, text=True)
    assert ran.stdout.strip() == f"mpirun (Open MPI) 4.1.4 from {current}"


def test_a_tarball_without_mpirun_stops_at_the_builder_saying_what_to_pack(tmp_path):
    tarball = _tarball(tmp_path, "lib/libmpi.so.40")
    run = build_for_real(archive_build(_settings(tarball, tmp_path), BOOKWORM, []), tmp_path / "node")
    assert run.returncode != 0
    assert "the tarball in mpi.archive.path has no bin/mpirun at its top or in its one top folder" in run.stderr
    assert "pack the Open MPI install tree" in run.stderr


def test_programs_linked_against_the_shipped_mpi_follow_its_content():
    mpicc, env = "/opt/site-mpi/current/bin/mpicc", "OPAL_PREFIX=/opt/site-mpi/current "
    first = probe_build(ProbeSettings(mpicc, env, "a" * 64), BOOKWORM, [])
    again = probe_build(ProbeSettings(mpicc, env, "a" * 64), BOOKWORM, [])
    newer = probe_build(ProbeSettings(mpicc, env, "b" * 64), BOOKWORM, [])
    assert first.key == again.key != newer.key
    assert first.script.startswith('mkdir -p "$STAGE/bin" && OPAL_PREFIX=/opt/site-mpi/current ')
    # the distro's MPI adds nothing: existing builds keep their identity
    assert linked_mpi("") == ()


def test_the_shipped_mpi_needs_compilers_but_not_the_distros_mpi():
    archive = mpi_package_sets(MpiConfig("archive", "/opt/m", MpiArchive("x.tgz", "", "site")))
    distro = mpi_package_sets(MpiConfig("distro", None))
    assert "openmpi-bin" not in archive["debian"] and "gcc" in archive["debian"]
    assert "openmpi-bin" in distro["debian"] and "gcc" in distro["debian"]
    assert mpi_package_sets(MpiConfig("prefix", "/opt/hpcx/ompi")) == {}
    assert MpiConfig("distro", None).site_env == ""
    shipped = render_profile("/opt/m/current", relocated=True)
    assert "export OPAL_PREFIX='/opt/m/current'\n" in shipped and "export PATH='/opt/m/current/bin'" in shipped
    # an existing prefix install is where it was built: login shells' other Open MPIs keep working
    assert "OPAL_PREFIX" not in render_profile("/opt/hpcx/ompi")
