"""The build-once mechanism's pure parts: identities, the build and install scripts, the control
machine's cache (a damaged download never enters it), the installed-build fact."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from rdmaprov.builds import store
from rdmaprov.builds.scripts import build_script, install_script
from rdmaprov.builds.spec import BuildSpec, Source
from rdmaprov.facts.builds import InstalledBuild, parse_installed_build


def _spec(tmp_path, **changes) -> BuildSpec:
    tarball = tmp_path / "tool-1.0.tar.gz"
    if not tarball.exists():
        (tmp_path / "tool-1.0").mkdir()
        (tmp_path / "tool-1.0" / "tool.c").write_text("int main(void) { return 0; }\n")
        subprocess.run(["tar", "-C", str(tmp_path), "-czf", str(tarball), "tool-1.0"], check=True)
    fields = {
        "name": "tool",
        "version": "1.0",
        "source": Source("file", path=str(tarball), setting="builds[0].source"),
        "script": 'mkdir -p "$STAGE/bin" && cc -o "$STAGE/bin/tool" tool.c',
        "prefix": str(tmp_path / "opt" / "tool"),
        "inputs": (("os", "debian-12"),),
    }
    return BuildSpec(**{**fields, **changes})


def test_identity_follows_source_content_script_and_platform(tmp_path):
    spec = _spec(tmp_path)
    assert spec.key == _spec(tmp_path).key and len(spec.key) == 12
    assert spec.dirname == f"1.0-{spec.key[:8]}" and spec.archive == f"tool-1.0-{spec.key}.tar.gz"
    changed = [
        _spec(tmp_path, version="1.1"),
        _spec(tmp_path, script="make"),
        _spec(tmp_path, inputs=(("os", "ubuntu-22.04"),)),
    ]
    assert len({s.key for s in changed} | {spec.key}) == 4


def test_missing_local_source_is_a_clear_error(tmp_path):
    spec = _spec(tmp_path, source=Source("file", path=str(tmp_path / "nope.tar.gz"), setting="builds[0].source"))
    with pytest.raises(
        ValueError,
        match=r"cannot read .*nope.tar.gz \(builds\[0\].source\): No such file or directory; give an existing local "
        r"tarball",
    ):
        _ = spec.key


def test_build_then_install_scripts_run_for_real(tmp_path, monkeypatch):
    """The scripts as a node runs them (here, in a scratch root): build, pack, checksum, install, switch current."""
    spec = _spec(tmp_path)
    root = tmp_path / "node"
    script = build_script(spec).replace("/var/cache/rdmaprov", str(root))
    work = spec.workdir.replace("/var/cache/rdmaprov", str(root))
    (root / "build").mkdir(parents=True)
    subprocess.run(["mkdir", "-p", f"{work}"], check=True)
    subprocess.run(["cp", spec.source.path, f"{work}/source.tar"], check=True)
    subprocess.run(["sh", "-c", script], check=True, capture_output=True)
    archive = root / "artifacts" / spec.archive
    assert archive.is_file() and not (root / "build" / f"tool-{spec.key}").exists()
    assert (root / "artifacts" / f"{spec.archive}.sha256").read_text().split()[0] == hashlib.sha256(
        archive.read_bytes()
    ).hexdigest()
    install = install_script(spec, keep_archive=False).replace("/var/cache/rdmaprov", str(root))
    subprocess.run(["sh", "-c", install], check=True, capture_output=True)
    prefix = tmp_path / "opt" / "tool"
    assert (prefix / "current").resolve() == (prefix / spec.dirname).resolve()
    assert subprocess.run([str(prefix / "current" / "bin" / "tool")]).returncode == 0
    marker = (prefix / spec.dirname / ".rdmaprov-build").read_text().split()
    assert marker[0] == spec.key and len(marker[1]) == 64 and not archive.exists()


def test_install_refuses_an_archive_that_does_not_match_its_checksum(tmp_path):
    spec = _spec(tmp_path)
    artifacts = tmp_path / "node" / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / spec.archive).write_bytes(b"not the archive")
    (artifacts / f"{spec.archive}.sha256").write_text(f"{'0' * 64}  {spec.archive}\n")
    install = install_script(spec, keep_archive=True).replace("/var/cache/rdmaprov", str(tmp_path / "node"))
    run = subprocess.run(["sh", "-c", install], capture_output=True, text=True)
    assert run.returncode != 0 and f"rdmaprov: {spec.archive} does not match its sha256 on" in run.stderr
    assert not (tmp_path / "opt" / "tool").exists()


def test_source_checksum_mismatch_stops_the_build(tmp_path):
    spec = _spec(
        tmp_path,
        source=Source("file", path=str(tmp_path / "tool-1.0.tar.gz"), sha256="1" * 64, setting="builds[0].source"),
    )
    work = spec.workdir.replace("/var/cache/rdmaprov", str(tmp_path / "node"))
    subprocess.run(["mkdir", "-p", work], check=True)
    subprocess.run(["cp", spec.source.path, f"{work}/source.tar"], check=True)
    run = subprocess.run(
        ["sh", "-c", build_script(spec).replace("/var/cache/rdmaprov", str(tmp_path / "node"))],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "source.tar does not match the sha256 in builds[0].source" in run.stderr


def test_damaged_download_never_enters_the_cache(artifact_store):
    good = artifact_store / "x-1-abc.tar.gz"
    (artifact_store / "x-1-abc.tar.gz.part").write_bytes(b"payload")
    (artifact_store / "x-1-abc.tar.gz.sha256.part").write_text(
        hashlib.sha256(b"payload").hexdigest() + "  x-1-abc.tar.gz\n"
    )
    assert store.commit("x-1-abc.tar.gz") is None and store.cached("x-1-abc.tar.gz") and good.read_bytes() == b"payload"
    (artifact_store / "y-1-abc.tar.gz.part").write_bytes(b"payload, cut sh")
    (artifact_store / "y-1-abc.tar.gz.sha256.part").write_text(
        hashlib.sha256(b"payload").hexdigest() + "  y-1-abc.tar.gz\n"
    )
    assert "arrived damaged" in store.commit("y-1-abc.tar.gz") and not store.cached("y-1-abc.tar.gz")
    assert not list(artifact_store.glob("y-1-abc*"))


def test_installed_build_fact_parser():
    assert parse_installed_build(["marker abc123 " + "f" * 64, "current 1.0-abc12345"]) == InstalledBuild(
        "abc123", "f" * 64, "1.0-abc12345"
    )
    assert parse_installed_build(["current "]) == InstalledBuild()
