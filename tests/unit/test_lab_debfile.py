"""The lab pool's packages with their data member in zstd (lab/debfile.py), on a real package from
Debian 12's archive; dpkg-deb, which the nodes' dpkg shares its reader with, is the judge."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rdmaprov.errors import UserError
from rdmaprov.lab.debfile import archive, member_name, members, recompress_data
from tests.conftest import FIXTURES

DEB = FIXTURES / "debian" / "gxx_12.2.0-3_amd64.deb"
needs_tools = pytest.mark.skipif(
    not (shutil.which("zstd") and shutil.which("dpkg-deb")), reason="zstd and dpkg-deb (tools/setup.sh installs them)"
)


def _dpkg_deb(*args: str) -> bytes:
    return subprocess.run(["dpkg-deb", *args], capture_output=True, check=True).stdout


def test_reading_and_writing_the_archive_gives_back_the_same_bytes():
    data = DEB.read_bytes()
    parts = members(data, DEB)
    assert [member_name(h) for h, _ in parts] == ["debian-binary", "control.tar.xz", "data.tar.xz"]
    assert archive(parts) == data  # odd-sized members padded as ar pads them


@needs_tools
def test_the_data_member_is_zstd_and_the_package_is_what_it_was(tmp_path: Path):
    deb = tmp_path / DEB.name
    shutil.copy(DEB, deb)
    assert recompress_data(deb)
    old, new = members(DEB.read_bytes(), DEB), members(deb.read_bytes(), deb)
    assert [member_name(h) for h, _ in new] == ["debian-binary", "control.tar.xz", "data.tar.zst"]
    assert new[:2] == old[:2]  # the control member untouched, byte for byte
    assert new[2][0][16:48] == old[2][0][16:48]  # the member's time, owner and mode kept
    assert _dpkg_deb("--fsys-tarfile", str(deb)) == _dpkg_deb("--fsys-tarfile", str(DEB))
    assert _dpkg_deb("--field", str(deb)) == _dpkg_deb("--field", str(DEB))
    # done once: a package already in zstd is left as it is
    before = deb.read_bytes()
    assert not recompress_data(deb)
    assert deb.read_bytes() == before
    assert not list(tmp_path.glob("*.zst-part"))


@pytest.mark.parametrize(
    "data, words",
    [
        (b"PK\x03\x04 not an ar archive", "not a Debian package"),
        (b"!<arch>\ndebian-binary   0           0     0     100644  4         X\n2.0\n", "bad member header at byte 8"),
    ],
)
def test_a_file_that_is_not_a_package_is_named(tmp_path: Path, data: bytes, words: str):
    deb = tmp_path / "broken.deb"
    deb.write_bytes(data)
    with pytest.raises(UserError, match=words) as caught:
        recompress_data(deb)
    assert str(deb) in str(caught.value)
