"""The lab's package mirror: the node stack's packages fetched on the host with apt, dependencies
resolved against each release's image, indexed with apt-ftparchive, signed with a key of this lab,
and served over HTTP on the lab bridge — the air-gapped path real users have. One repository holds
a suite per release the lab's nodes run.

Each package's files are compressed again with zstd (as Ubuntu's archive ships them) instead of
Debian's xz, once when the pool is made: under QEMU's emulation, xz decompression was half of what
dpkg spent unpacking the node stack (docs/lab.md). The files, their owners and the control member
are the same bytes; only the compression of the data member differs, which apt and dpkg take alike.

apt runs with a configuration of its own (APT_CONFIG: its own sources, lists, caches and no
apt.conf.d of the host), so the host's apt setup is neither read nor changed and a bookworm host
fetches trixie packages as easily as its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rdmaprov.errors import UserError
from rdmaprov.lab import debfile
from rdmaprov.lab.image import DEBIAN_MIRROR, Image
from rdmaprov.lab.paths import cache_root, make_once, making
from rdmaprov.lab.proc import require, run
from rdmaprov.lab.releases import Release
from rdmaprov.packages import lab_packages

ARCHIVE_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


POOL_FORMAT = "data.tar.zst"  # in the pool's key: a pool made in another form is made again


def _pool_dir(image: Image, packages: list[str]) -> Path:
    recipe = image.root.name + " ".join(packages) + DEBIAN_MIRROR + POOL_FORMAT
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    return cache_root() / "mirror" / key


def _apt_config(release: Release, image: Image, archives: Path) -> Path:
    """A private apt configuration for `release`: the archive's suite, signed by Debian's keyring,
    resolved against the image's package database."""
    root = cache_root() / "apt" / release.name
    for sub in ("etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "etc/trusted.gpg.d", "lists/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    suites = [release.codename] + ([release.kernel_suite] if release.kernel_suite else [])
    (root / "etc/sources.list").write_text(
        "".join(f"deb [signed-by={ARCHIVE_KEYRING}] {DEBIAN_MIRROR} {suite} main\n" for suite in suites)
    )
    settings = {
        "Dir::Etc": root / "etc",
        "Dir::Etc::main": root / "etc/apt.conf",
        "Dir::Etc::parts": root / "etc/apt.conf.d",
        "Dir::State": root,
        "Dir::State::lists": root / "lists",
        "Dir::State::status": image.rootfs / "var/lib/dpkg/status",
        "Dir::Cache": root / "cache",
        "Dir::Cache::archives": archives,
        "Dir::Log": root / "log",
        "APT::Architecture": "amd64",
        "Acquire::Languages": "none",
        "Debug::NoLocking": "1",
    }
    conf = root / "apt.conf"
    conf.write_text("".join(f'{key} "{value}";\n' for key, value in settings.items()))
    return conf


def _apt_get(conf: Path, args: list[str], what: str) -> None:
    proc = subprocess.run(
        ["apt-get", "-q", "-y", *args], capture_output=True, text=True, env=dict(os.environ, APT_CONFIG=str(conf))
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise UserError(f"{what} failed (check that this machine reaches {DEBIAN_MIRROR}):\n{tail}")


def download(image: Image, release: Release, packages: list[str], dest: Path, log=print) -> None:
    """Download `packages` and what the release's image lacks of their dependencies into `dest`."""
    require("apt-get")
    if not ARCHIVE_KEYRING.exists():
        raise UserError(f"checking Debian's signatures needs {ARCHIVE_KEYRING}: apt-get install debian-archive-keyring")
    (dest / "partial").mkdir(parents=True, exist_ok=True)
    # the release's apt folder (its lists and caches) is shared by every download for that release
    with making(cache_root() / "apt" / release.name, log):
        conf = _apt_config(release, image, dest)
        _apt_get(conf, ["update"], f"reading the {release.name} package index")
        _apt_get(
            conf,
            [
                "--download-only",
                "--no-install-recommends",
                "-o",
                "APT::Get::AllowUnauthenticated=false",
                "install",
                *packages,
            ],
            f"fetching {release.name} packages",
        )
    shutil.rmtree(dest / "partial", ignore_errors=True)
    if not list(dest.glob("*.deb")):
        raise UserError(f"fetching {release.name} packages produced no .deb files")


def install_into(rootfs: Path, image: Image, release: Release, packages: list[str], debs: Path, log=print) -> None:
    """Download `packages` into `debs` (resolved against `image`, whose root `rootfs` is or is a
    copy of) and install them in `rootfs` with its own dpkg. A linux-base among them goes first,
    alone: a kernel pre-depends on it, and dpkg configures a pre-dependency first only then."""
    download(image, release, packages, debs, log)
    target = rootfs / "tmp/rdmaprov-debs"
    shutil.copytree(debs, target)
    names = sorted(p.name for p in target.glob("*.deb"))
    first = [name for name in names if name.startswith("linux-base_")]
    for batch in (first, [name for name in names if name not in first]):
        if batch:
            installing = ["chroot", str(rootfs), "dpkg", "-i", *(f"/tmp/rdmaprov-debs/{n}" for n in batch)]
            run(installing, f"installing {', '.join(packages)}")
    shutil.rmtree(target)


def fetch_packages(image: Image, release: Release, log=print) -> Path:
    """The lab mirror's packages for one release, downloaded once and cached."""
    packages = lab_packages(release.version)
    pool = _pool_dir(image, packages)
    make_once(pool, pool / "complete", lambda: _fetch(image, release, packages, pool, log), log)
    return pool


def _fetch(image: Image, release: Release, packages: list[str], pool: Path, log) -> None:
    """Download into a scratch folder beside `pool`, compress each package's files again with zstd,
    then put it in place whole."""
    log(f"lab: fetching {len(packages)} packages and their dependencies for {release.title}")
    partial = pool.with_name(pool.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    require("zstd")
    download(image, release, packages, partial / "debs", log)
    for deb in sorted((partial / "debs").glob("*.deb")):
        debfile.recompress_data(deb)
    (partial / "complete").write_text("\n".join(packages) + "\n")
    shutil.rmtree(pool, ignore_errors=True)
    partial.rename(pool)


def _gpg(home: Path, *args: str, what: str) -> subprocess.CompletedProcess:
    return run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        what,
    )


def _index_suite(root: Path, suite: str, pool: Path) -> Path:
    """dists/SUITE (Packages, Release) over pool/SUITE, a link to the suite's downloaded packages."""
    dists = root / "dists" / suite
    binary = dists / "main" / "binary-amd64"
    binary.mkdir(parents=True)
    (root / "pool").mkdir(exist_ok=True)
    (root / "pool" / suite).symlink_to(pool / "debs")
    # the two sums Debian's own Packages files carry: apt's download computes each sum the index
    # lists, and SHA-1 and SHA-512 added a second per 50 MB of packages to an emulated node
    only = ["-o", "APT::FTPArchive::SHA1=false", "-o", "APT::FTPArchive::SHA512=false"]
    packages = run(["apt-ftparchive", *only, "packages", f"pool/{suite}"], "indexing the lab mirror", cwd=root).stdout
    (binary / "Packages").write_text(packages)
    release = run(
        [
            "apt-ftparchive",
            "-o",
            f"APT::FTPArchive::Release::Suite={suite}",
            "-o",
            f"APT::FTPArchive::Release::Codename={suite}",
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
        cwd=dists,
    ).stdout
    (dists / "Release").write_text(release)
    return dists


def build_repository(lab_dir: Path, pools: dict[str, Path]) -> Path:
    """Index and sign the packages of each suite ({suite: pool}) as one Debian repository under
    lab_dir/mirror/debian."""
    require("gpg", "apt-ftparchive")
    root = lab_dir / "mirror" / "debian"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
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
    for suite, pool in pools.items():
        dists = _index_suite(root, suite, pool)
        _gpg(
            home,
            "--yes",
            "--clearsign",
            "-o",
            str(dists / "InRelease"),
            str(dists / "Release"),
            what="signing the lab mirror",
        )
        _gpg(
            home,
            "--yes",
            "-abs",
            "-o",
            str(dists / "Release.gpg"),
            str(dists / "Release"),
            what="signing the lab mirror",
        )
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
