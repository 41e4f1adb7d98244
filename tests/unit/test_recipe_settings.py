"""Build recipes' settings are typed now; what they were before must not move. A node records
each operation's fingerprint (engine/desired.py) and each build's id: were either to change with
an upgrade of rdmaprov, every node would read as changed (intentional drift) and every NCCL,
nccl-tests, probe and site build would be rebuilt. The figures below were taken with the mapping
settings these classes replaced, on the same inputs."""

from __future__ import annotations

import pytest

from rdmaprov.deploys.builds import UserBuildSettings, user_build
from rdmaprov.deploys.gate_tools import ProbeSettings, probe_build
from rdmaprov.deploys.nccl import NcclSettings, NcclTestsSettings, nccl_build, nccl_tests_build
from rdmaprov.deploys.openmpi import ArchiveSettings, archive_build
from rdmaprov.engine.desired import fingerprint
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo

BOOKWORM = OsInfo("debian", "12", "bookworm", "debian", "Debian GNU/Linux 12 (bookworm)")
H100 = Gpu("NVIDIA H100 80GB HBM3", "9.0", "535.129.03")
NCCL = NcclSettings("2.18.3-1", {"kind": "git"}, None, None, "12.2", "/opt/nccl", False)
USER = {
    "name": "tool",
    "version": "1.0",
    "source": {"kind": "git", "url": "https://example.org/tool.git", "ref": "v1.0"},
    "build": "make install PREFIX=$STAGE",
}

# (recipe, settings, build id, operation fingerprint) as the mapping settings gave them
BEFORE = [
    ("nccl", nccl_build, NCCL, "a7ad1391c55a", "4bcb2656ebc7a5ac"),
    (
        "tests",
        nccl_tests_build,
        NcclTestsSettings(NCCL, {"kind": "git", "prefix": "/opt/nccl-tests"}, None, "", ""),
        "a9232ab2a5e5",
        "bc67ec96ed6ffa0b",
    ),
    (
        "archive",
        archive_build,
        ArchiveSettings("/srv/ompi.tar.gz", "ab" * 32, "5.0.7", "/opt/site-mpi"),
        "f066af07b89c",
        "6924a97cd74cbb12",
    ),
    ("probe", probe_build, ProbeSettings("mpicc", "", "cd" * 32), "3136aacef8c5", "20492f0ecada2f17"),
    # prefix and after_install not written: left out of the fingerprint, as the mapping had them
    ("user", user_build, UserBuildSettings.of(USER, 0, USER["source"]), "71e181b01a8a", "f307f75b75c37ca1"),
]


@pytest.mark.parametrize(("name", "make", "settings", "build_id", "recorded"), BEFORE, ids=[b[0] for b in BEFORE])
def test_typed_settings_keep_the_build_ids_and_fingerprints_of_the_mappings(name, make, settings, build_id, recorded):
    assert make(settings, BOOKWORM, [H100]).key == build_id
    assert fingerprint((), {"recipe": name, "slot": name, "settings": settings}) == recorded


def test_a_written_prefix_counts_in_a_user_builds_fingerprint():
    written = UserBuildSettings.of({**USER, "prefix": "/opt/tool"}, 0, USER["source"])
    assert written.fingerprinted()["prefix"] == "/opt/tool"
    assert fingerprint((), {"settings": written}) != fingerprint((), {"settings": BEFORE[-1][2]})
