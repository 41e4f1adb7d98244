"""The lab mirror's index (lab/mirror.py) over a pool holding a real Debian package compressed
again with zstd: what an emulated node's apt checks each download against."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from rdmaprov.lab import mirror
from rdmaprov.lab.debfile import recompress_data
from tests.conftest import FIXTURES


@pytest.mark.skipif(
    not (shutil.which("apt-ftparchive") and shutil.which("zstd")), reason="apt-utils and zstd (tools/setup.sh)"
)
def test_the_index_lists_the_zstd_package_with_debians_two_sums(tmp_path: Path):
    pool = tmp_path / "pool"
    (pool / "debs").mkdir(parents=True)
    deb = pool / "debs" / "gxx_12.2.0-3_amd64.deb"
    shutil.copy(FIXTURES / "debian" / deb.name, deb)
    recompress_data(deb)
    dists = mirror._index_suite(tmp_path / "repo", "bookworm", pool)
    fields = dict(
        line.split(": ", 1) for line in (dists / "main/binary-amd64/Packages").read_text().splitlines() if ": " in line
    )
    assert fields["Package"] == "g++" and fields["Filename"] == f"pool/bookworm/{deb.name}"
    data = deb.read_bytes()
    assert fields["Size"] == str(len(data))
    assert fields["SHA256"] == hashlib.sha256(data).hexdigest()
    assert fields["MD5sum"] == hashlib.md5(data).hexdigest()
    # apt computes every sum the index lists: the two Debian's archive lists, not four
    assert "SHA1" not in fields and "SHA512" not in fields
