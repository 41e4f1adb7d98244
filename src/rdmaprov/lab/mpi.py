"""`rdmaprov lab mpi`: an Open MPI built once on the control machine and cached, the lab's site
MPI for `mpi.source: archive`.

Debian 12 ships Open MPI 4.1 and Debian 13 ships 5.0, which cannot share a job, so a lab of both
releases gates all_reduce through one MPI shipped to every node, the way a site ships HPC-X or its
own build. This one is Open MPI from Debian's own source tarball (the package archive is what the
lab may reach), built here natively (about six minutes on two cores; inside the emulated VMs it
would take an hour), and on purpose for a prefix no node uses: rdmaprov unpacks it elsewhere and
OPAL_PREFIX relocates it, as it must for any site's tarball. TCP and shared memory only (no UCX,
libfabric or verbs: the gate's MPI traffic is TCP), its own hwloc, libevent and PMIx, no Fortran,
OpenSHMEM or MPI-IO; the result needs libc, libm and zlib, and the glibc it was built against or a
newer one: built on Debian 12 (glibc 2.36), it runs on Debian 12 and 13 nodes alike.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import requests

from rdmaprov.errors import UserError
from rdmaprov.lab.image import DEBIAN_MIRROR
from rdmaprov.lab.paths import cache_root, making
from rdmaprov.lab.proc import require, run

VERSION = "4.1.4"
SOURCE_URL = f"{DEBIAN_MIRROR}/pool/main/o/openmpi/openmpi_{VERSION}.orig.tar.xz"
SOURCE_SHA256 = "ddaee7dbdb01eb4fab1fda5b5e03e8bbff026711806c095c1f39bb410f99f263"
BUILT_FOR = f"/opt/openmpi-{VERSION}"
CONFIGURE = (
    f"--prefix={BUILT_FOR}",
    "--disable-mpi-fortran",
    "--disable-oshmem",
    "--disable-io-romio",
    "--disable-man-pages",
    "--without-ucx",
    "--without-ofi",
    "--without-verbs",
    "--enable-mca-no-build=btl-openib,coll-hcoll,fcoll,fbtl,io",
    "--with-hwloc=internal",
    "--with-libevent=internal",
    "--with-pmix=internal",
)


STALE_S = 7200  # a scratch folder this old belongs to a build that was killed


def glibc() -> str:
    """This machine's glibc version: the oldest a build made here runs with."""
    return (os.confstr("CS_GNU_LIBC_VERSION") or "glibc unknown").split()[-1]


def archive_path() -> Path:
    """The cached tarball; its name carries the recipe and the glibc it needs, so a changed
    recipe, or another control machine's release, builds anew."""
    recipe = hashlib.sha256(" ".join((SOURCE_SHA256, *CONFIGURE)).encode()).hexdigest()[:8]
    return cache_root() / "mpi" / f"openmpi-{VERSION}-glibc{glibc()}-{recipe}.tar.gz"


def _tidy(folder: Path) -> None:
    """Remove the scratch folders of builds that were killed (an interrupted one removes its own)."""
    for scratch in folder.glob(".build-*"):
        try:
            if scratch.stat().st_mtime < time.time() - STALE_S:
                shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue


def _download(dest: Path) -> None:
    digest = hashlib.sha256()
    try:
        with requests.get(SOURCE_URL, stream=True, timeout=60) as response:
            response.raise_for_status()
            with open(dest, "wb") as handle:
                for block in response.iter_content(1 << 20):
                    digest.update(block)
                    handle.write(block)
    except requests.RequestException as exc:
        raise UserError(f"cannot download {SOURCE_URL}: {exc}; the lab's MPI is built from it") from None
    if digest.hexdigest() != SOURCE_SHA256:
        raise UserError(f"{SOURCE_URL} does not match its sha256 ({SOURCE_SHA256[:16]}…): a damaged download?")


def ensure_mpi_archive(log=print) -> Path:
    """The cached archive, built first if there is none (an interrupted build leaves nothing).
    Two runs at once take turns (making): the later one finds it built."""
    path = archive_path()
    if not path.exists():
        with making(path, log):
            if not path.exists():
                _build(path, log)
    log(f"mpi: {path} (needs glibc {glibc()} or newer on the nodes)")
    return path


def _build(path: Path, log) -> None:
    """Download, configure, build and pack Open MPI into `path`, in a scratch folder beside it."""
    require("gcc", "make", "tar", "xz")
    path.parent.mkdir(parents=True, exist_ok=True)
    _tidy(path.parent)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as scratch:
        work = Path(scratch)
        log(f"mpi: downloading Open MPI {VERSION}'s source from {SOURCE_URL}")
        _download(work / "source.tar.xz")
        run(["tar", "-xf", str(work / "source.tar.xz"), "-C", str(work)], "unpacking Open MPI's source")
        tree = work / f"openmpi-{VERSION}"
        log(f"mpi: building Open MPI {VERSION} here (a few minutes, once; cached in {path.parent})")
        run([str(tree / "configure"), *CONFIGURE], "configuring Open MPI", cwd=tree)
        run(["make", f"-j{os.cpu_count() or 1}"], "building Open MPI", cwd=tree)
        dest = work / "dest"
        run(["make", "install", f"DESTDIR={dest}"], "installing Open MPI", cwd=tree)
        part = work / path.name  # in the scratch folder: two builds at once never share it
        owned = ["--owner=0", "--group=0", "--numeric-owner"]
        run(["tar", *owned, "-C", f"{dest}{BUILT_FOR}", "-czf", str(part), "."], "packing Open MPI")
        part.replace(path)
