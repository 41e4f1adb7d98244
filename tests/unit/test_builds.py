"""The build-once mechanism's pure parts: identities, the build and install scripts, the control
machine's cache (a damaged download never enters it), the installed-build fact."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from rdmaprov.builds import store
from rdmaprov.builds.fanout import CONTROL, rounds, routes
from rdmaprov.builds.scripts import DAMAGED, build_script, install_script, receive_script
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


def build_for_real(spec: BuildSpec, root) -> subprocess.CompletedProcess:
    """The build script as the builder runs it, its /var/cache/rdmaprov moved to `root`, with the
    source uploaded where the control machine puts it."""
    script = build_script(spec).replace("/var/cache/rdmaprov", str(root))
    work = spec.workdir.replace("/var/cache/rdmaprov", str(root))
    subprocess.run(["mkdir", "-p", f"{work}", f"{root}/build"], check=True)
    subprocess.run(["cp", spec.source.path, f"{work}/source.tar"], check=True)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True)


def install_for_real(spec: BuildSpec, root) -> None:
    install = install_script(spec, keep_archive=False).replace("/var/cache/rdmaprov", str(root))
    subprocess.run(["sh", "-c", install], check=True, capture_output=True)


def test_build_then_install_scripts_run_for_real(tmp_path, monkeypatch):
    """The scripts as a node runs them (here, in a scratch root): build, pack, checksum, install, switch current."""
    spec = _spec(tmp_path)
    root = tmp_path / "node"
    assert build_for_real(spec, root).returncode == 0
    archive = root / "artifacts" / spec.archive
    assert archive.is_file() and not (root / "build" / f"tool-{spec.key}").exists()
    assert (root / "artifacts" / f"{spec.archive}.sha256").read_text().split()[0] == hashlib.sha256(
        archive.read_bytes()
    ).hexdigest()
    install_for_real(spec, root)
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
    run = build_for_real(spec, tmp_path / "node")
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


# --- shipping an archive node to node (builds/fanout.py) ---------------------------------------


def test_holders_double_each_round_and_every_node_falls_back_towards_a_holder_then_the_control_machine():
    nodes = [f"n{i}" for i in range(2, 9)]
    plan = routes(["n1"], nodes)
    # round 1: n1 -> n2; round 2: n1 -> n3, n2 -> n4; round 3: n1..n4 -> n5..n8
    assert {node: sources[0] for node, sources in plan.items()} == {
        "n2": "n1", "n3": "n1", "n4": "n2", "n5": "n1", "n6": "n2", "n7": "n3", "n8": "n4",
    }  # fmt: skip
    assert plan["n8"] == ("n4", "n2", "n1", CONTROL)  # its parent, then who gave it to the parent, ...
    assert all(sources[-1] == CONTROL for sources in plan.values())
    assert rounds(1, 7) == 3


def test_without_a_holder_the_control_machine_sends_to_two_nodes_only():
    nodes = [f"n{i}" for i in range(1, 65)]
    plan = routes([], nodes)
    from_control = [node for node, sources in plan.items() if sources[0] == CONTROL]
    assert from_control == ["n1", "n2"]
    senders = [sources[0] for sources in plan.values()]
    assert max(senders.count(node) for node in nodes) <= 6  # each holder sends once a round
    assert rounds(0, 64) == 6  # 1 round from the control machine, then 2 -> 4 -> ... -> 64


def test_several_holders_are_roots_and_each_others_fallbacks():
    plan = routes(["a", "b"], ["c", "d", "e", "f"])
    assert plan == {
        "c": ("a", "b", CONTROL), "d": ("b", "a", CONTROL), "e": ("a", "b", CONTROL), "f": ("b", "a", CONTROL),
    }  # fmt: skip
    assert routes(["a"], []) == {} and rounds(3, 0) == 0


def test_a_received_copy_is_kept_only_when_its_sha256_is_the_archives(tmp_path):
    """receive_script as a node runs it, for the copy the control machine uploaded as .part."""
    spec = _spec(tmp_path)
    artifacts = tmp_path / "node" / "artifacts"
    artifacts.mkdir(parents=True)
    payload = b"the archive"
    sha = hashlib.sha256(payload).hexdigest()

    def receive(content: bytes) -> subprocess.CompletedProcess:
        (artifacts / f"{spec.archive}.part").write_bytes(content)
        script = receive_script(spec, sha).replace("/var/cache/rdmaprov", str(tmp_path / "node"))
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True)

    damaged = receive(b"the archivf")
    assert damaged.returncode == DAMAGED
    assert damaged.stderr.startswith(
        f"rdmaprov: the copy of {spec.archive} from the control machine is damaged (sha256 "
    )
    assert f"expected {sha[:16]}…)" in damaged.stderr and list(artifacts.iterdir()) == []  # nothing left behind
    assert receive(payload).returncode == 0
    assert (artifacts / spec.archive).read_bytes() == payload
    assert (artifacts / f"{spec.archive}.sha256").read_text() == f"{sha}  {spec.archive}\n"
    assert not (artifacts / f"{spec.archive}.part").exists()
