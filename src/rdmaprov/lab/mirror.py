"""The lab's package mirror: the node stack's packages fetched on the host with apt, dependencies
resolved against the image's own package database, indexed with apt-ftparchive, signed with a
key of this lab, and served over HTTP on the lab bridge — the air-gapped path real users have.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from rdmaprov.errors import UserError
from rdmaprov.lab.image import SUITE, Image
from rdmaprov.lab.paths import cache_root
from rdmaprov.lab.proc import require, run
from rdmaprov.packages import lab_packages


def _pool_dir(image: Image, packages: list[str]) -> Path:
    key = hashlib.sha256((image.root.name + " ".join(packages)).encode()).hexdigest()[:16]
    return cache_root() / "mirror" / key


def fetch_packages(image: Image, log=print) -> Path:
    """Download the packages (and what the image lacks of their dependencies) once; cached."""
    packages = lab_packages()
    pool = _pool_dir(image, packages)
    if (pool / "complete").exists():
        return pool
    require("apt-get", "apt-ftparchive")
    log(f"lab: fetching {len(packages)} packages and their dependencies for the mirror")
    partial = pool.with_name(pool.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "debs" / "partial").mkdir(parents=True)
    status = image.rootfs / "var/lib/dpkg/status"
    cmd = [
        "apt-get",
        "-q",
        "-y",
        "--download-only",
        "--no-install-recommends",
        "-o",
        f"Dir::State::status={status}",
        "-o",
        f"Dir::Cache::archives={partial / 'debs'}",
        "-o",
        "Debug::NoLocking=1",
        "-o",
        "APT::Get::AllowUnauthenticated=false",
        "install",
        *packages,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        hint = (
            "run `apt-get update` on this machine first"
            if "Unable to locate" in proc.stderr
            else "check that this machine reaches its Debian apt mirror"
        )
        raise UserError(f"fetching lab packages failed ({hint}):\n" + "\n".join(proc.stderr.strip().splitlines()[-6:]))
    shutil.rmtree(partial / "debs" / "partial", ignore_errors=True)
    if not list((partial / "debs").glob("*.deb")):
        raise UserError("fetching lab packages produced no .deb files")
    (partial / "complete").write_text("\n".join(packages) + "\n")
    shutil.rmtree(pool, ignore_errors=True)
    partial.rename(pool)
    return pool


def _gpg(home: Path, *args: str, what: str) -> subprocess.CompletedProcess:
    return run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        what,
    )


def build_repository(lab_dir: Path, pool: Path) -> Path:
    """Index and sign the packages as a Debian repository under lab_dir/mirror/debian."""
    require("gpg", "apt-ftparchive")
    root = lab_dir / "mirror" / "debian"
    shutil.rmtree(root, ignore_errors=True)
    binary = root / "dists" / SUITE / "main" / "binary-amd64"
    binary.mkdir(parents=True)
    (root / "pool").symlink_to(pool / "debs")
    packages = run(["apt-ftparchive", "packages", "pool"], "indexing the lab mirror", cwd=root).stdout
    (binary / "Packages").write_text(packages)
    release = run(
        [
            "apt-ftparchive",
            "-o",
            f"APT::FTPArchive::Release::Suite={SUITE}",
            "-o",
            f"APT::FTPArchive::Release::Codename={SUITE}",
            "-o",
            "APT::FTPArchive::Release::Components=main",
            "-o",
            "APT::FTPArchive::Release::Architectures=amd64",
            "-o",
            "APT::FTPArchive::Release::Origin=rdmaprov-lab",
            "release",
            ".",
        ],
        "writing the lab mirror's Release",
        cwd=root / "dists" / SUITE,
    ).stdout
    (root / "dists" / SUITE / "Release").write_text(release)

    home = lab_dir / "gnupg"
    if not home.exists():
        home.mkdir(mode=0o700)
        _gpg(
            home,
            "--quick-generate-key",
            "rdmaprov lab mirror <lab@rdmaprov.invalid>",
            "ed25519",
            "sign",
            "never",
            what="creating the lab mirror's signing key",
        )
    dists = root / "dists" / SUITE
    _gpg(
        home,
        "--yes",
        "--clearsign",
        "-o",
        str(dists / "InRelease"),
        str(dists / "Release"),
        what="signing the lab mirror",
    )
    _gpg(home, "--yes", "-abs", "-o", str(dists / "Release.gpg"), str(dists / "Release"), what="signing the lab mirror")
    key = _gpg(home, "--armor", "--export", what="exporting the lab mirror's key").stdout
    (lab_dir / "mirror.asc").write_text(key)
    # gpg leaves an agent daemon behind; the lab must not leave processes it does not track.
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
    return root


def serve(lab_dir: Path, address: str, port: int) -> subprocess.Popen:
    """Serve lab_dir/mirror over HTTP on the bridge address only."""
    log = open(lab_dir / "mirror.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", address, "--directory", str(lab_dir / "mirror")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
