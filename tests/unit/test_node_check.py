"""node-check: the expectations file holds what verify holds a node to, node-check judges captured
node reports exactly as verify does, and the shipped zipapp runs on a bare `python3 -I -S`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from rdmaprov.facts.node_report import node_report_command
from rdmaprov.health.checks import verify_node
from rdmaprov.inventory import load_inventory
from rdmaprov.nodecheck import expectations, zipapp
from rdmaprov.nodecheck.expectations import SlurmSide
from rdmaprov.nodecheck.run import ReportFailed, check_node, main, read_report
from rdmaprov.parsers.node import parse_node_report
from tests.conftest import FIXTURES, REPO
from tests.support.inventories import lab_host

LAB_REPORT = FIXTURES / "lab" / "node_report_rxe.txt"
INVENTORIES = sorted((REPO / "inventories").glob("*.yaml"))


def _gpu_report() -> str:
    """The lab report with the H100 capture's GPU sections: GPU checks have something to judge."""
    smi = (FIXTURES / "gpu-h100" / "nvidia-smi_q.txt").read_text()
    linker = "/usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"
    return (
        LAB_REPORT.read_text()
        + "\n@@ gpus\nNVIDIA H100 80GB HBM3, 9.0, 580.159.04\n@@ nvidia_smi_q\n"
        + smi
        + f"\n@@ nccl_linker\n{linker}\n"
    )


def _rendered(inventory, name: str, slurm: SlurmSide | None = None):
    return expectations.parse(expectations.render(inventory.name, inventory.hosts[name], slurm))


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_the_expectations_file_judges_every_host_as_verify_does(path: Path):
    """For every host of every example inventory, and reports with and without GPUs: the findings
    from the settings read back from the file are verify's findings, one for one."""
    inventory = load_inventory(path, require_files=False)
    reports = [parse_node_report(LAB_REPORT.read_text()), parse_node_report(_gpu_report())]
    for name, host in inventory.hosts.items():
        again = _rendered(inventory, name).host
        assert again.name == name
        for report in reports:
            assert [asdict(f) for f in verify_node(again, report)] == [asdict(f) for f in verify_node(host, report)]


def test_the_expectations_file_is_stable_and_carries_no_more_than_the_checks_read():
    inventory = load_inventory(REPO / "inventories" / "prod.yaml", require_files=False)
    host = inventory.hosts[next(iter(inventory.hosts))]
    text = expectations.render(inventory.name, host, SlurmSide("gpu001", True, 0.1))
    assert text == expectations.render(inventory.name, host, SlurmSide("gpu001", True, 0.1))
    document = json.loads(text)
    keys = {"fabric", "rdma", "mtu", "netns_mode", "limits", "gpu", "nccl", "erdma", "roce_qos"}
    assert set(document["node"]) <= keys
    assert "mirror" not in text and "builds" not in text and "source" not in json.dumps(document["node"]["gpu"])
    assert document["node"]["gpu"] == {"count": 8, "driver_version": "535.129.03"}
    assert document["slurm"] == {"node_name": "gpu001", "drain": True, "max_drain_fraction": 0.1, "budget_s": 55}


def _write_expectations(tmp_path: Path, inventory_path: Path = REPO / "inventories" / "lab.yaml") -> Path:
    inventory = load_inventory(inventory_path, require_files=False)
    path = tmp_path / "node-check.json"
    path.write_text(expectations.render(inventory.name, inventory.hosts["node1"], None))
    return path


def test_node_check_passes_the_converged_lab_report(tmp_path, capsys):
    code = main(
        ["--expectations", str(_write_expectations(tmp_path)), "--state-dir", str(tmp_path / "state")]
        + ["--report-file", str(LAB_REPORT)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("node1: healthy (")


def test_node_check_prints_one_line_per_failure_and_exits_4(tmp_path, capsys):
    text = LAB_REPORT.read_text()
    gone = "\n".join(line for line in text.splitlines() if not line.startswith("port rxe0"))
    gone = gone.replace("netns exclusive", "netns shared")
    report = tmp_path / "report.txt"
    report.write_text(gone)
    code = main(
        ["--expectations", str(_write_expectations(tmp_path)), "--report-file", str(report)]
        + ["--state-dir", str(tmp_path / "state")]
    )
    assert code == 4
    assert capsys.readouterr().out.splitlines() == [
        "rdma.device_present rxe0: missing (expected present)",
        "netns.mode ib_core: shared (expected exclusive)",
        "nccl.hca_matches /etc/nccl.conf: none (devices: none) (expected a device matching rxe)",
    ]


def test_node_check_judges_error_counters_against_its_previous_read(tmp_path, capsys):
    base = LAB_REPORT.read_text().split("@@ counters")[0]
    counters = (FIXTURES / "lab" / "rxe_error_counters.txt").read_text()
    first, grown = tmp_path / "first.txt", tmp_path / "grown.txt"
    first.write_text(base + "@@ counters\n" + counters)
    grown.write_text(base + "@@ counters\n" + counters.replace("link_downed:0", "link_downed:1"))
    args = ["--expectations", str(_write_expectations(tmp_path)), "--state-dir", str(tmp_path / "state")]
    assert main([*args, "--report-file", str(first)]) == 0  # the baseline
    assert json.loads((tmp_path / "state" / "counters.json").read_text())["hosts"]["node1"]["ports"]
    capsys.readouterr()
    assert main([*args, "--report-file", str(grown)]) == 4
    [line] = capsys.readouterr().out.splitlines()
    assert line == "rdma.port_errors rxe0/1: link_downed +1 in 0 s (expected link_downed +0)"


def test_node_check_json_carries_every_finding(tmp_path, capsys):
    code = main(
        ["--expectations", str(_write_expectations(tmp_path)), "--report-file", str(LAB_REPORT), "--json"]
        + ["--state-dir", str(tmp_path / "state")]
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["healthy"] and document["host"] == "node1"
    assert {f["id"] for f in document["findings"]} >= {"rdma.port_state", "netns.mode", "limits.memlock_login"}


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "cannot be read"),
        ("{not json", "not JSON"),
        ('{"format": 99}', "format 99; this node-check reads format 1"),
        ('{"format": 1, "cluster": "c", "host": "n"}', "missing or wrong entry"),
    ],
)
def test_a_missing_or_wrong_expectations_file_is_exit_1_naming_the_file(tmp_path, capsys, content, says):
    path = tmp_path / "node-check.json"
    if content is not None:
        path.write_text(content)
    assert main(["--expectations", str(path), "--report-file", str(LAB_REPORT)]) == 1
    err = capsys.readouterr().err
    assert f"error: {path}: " in err and says in err and "rdmaprov apply" in err


def test_a_report_past_its_deadline_is_a_failure_of_its_own(tmp_path):
    with pytest.raises(ReportFailed, match="did not finish within 0 s"):
        read_report(0, lab_host())
    expected = expectations.parse(
        _write_expectations(tmp_path).read_text().replace('"report_timeout_s": 30', '"report_timeout_s": 0')
    )
    outcome = check_node(expected, None)
    assert not outcome.healthy and outcome.lines()[0].startswith("node-check.report node1: did not finish within 0 s")


def test_node_check_reads_the_node_with_verifys_command():
    from rdmaprov.facts.node import NodeFacts
    from rdmaprov.facts.packed import packed

    assert NodeFacts().command() == packed(node_report_command())


def test_the_zipapp_imports_only_rdmaprov_and_the_standard_library():
    modules = zipapp.imported_modules()
    assert "rdmaprov.health.checks" in modules and "rdmaprov.nodecheck.run" in modules
    for heavy in ("pyinfra", "yaml", "rich", "jsonschema", "gevent", "requests"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in modules)


def test_the_zipapp_is_reproducible_whatever_the_timezone(tmp_path):
    probe = "import sys, hashlib; from rdmaprov.nodecheck import zipapp; print(zipapp.sha256())"
    digests = {
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=dict(os.environ, TZ=tz), check=True
        ).stdout.strip()
        for tz in ("UTC", "Asia/Tokyo", "America/Los_Angeles")
    }
    assert digests == {zipapp.sha256()}


def test_the_zipapp_runs_on_a_bare_python(tmp_path):
    """The shipped file, run as the wrapper runs it: `python3 -I -S`, no site-packages, no PYTHONPATH."""
    app = tmp_path / "node-check.pyz"
    app.write_bytes(zipapp.build())
    assert zipapp.build().startswith(b"#!/usr/bin/python3 -IS\n")
    cache = tmp_path / "cache"
    # -I ignores PYTHONPATH (proven by the imports test); the cache variable is read by the app itself
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src"), "RDMAPROV_NODE_CHECK_CACHE": str(cache)}
    common = ["--expectations", str(_write_expectations(tmp_path)), "--state-dir", str(tmp_path / "state")]
    ok = subprocess.run(
        [sys.executable, "-I", "-S", str(app), *common, "--report-file", str(LAB_REPORT)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("node1: healthy")
    text = LAB_REPORT.read_text()
    (tmp_path / "down.txt").write_text(text.replace("state 4: ACTIVE", "state 1: DOWN"))
    down = subprocess.run(
        [sys.executable, "-I", "-S", str(app), *common, "--report-file", str(tmp_path / "down.txt")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (down.returncode, down.stdout) == (4, "rdma.port_state rxe0/1: DOWN (expected ACTIVE)\n")
    usage = subprocess.run([sys.executable, "-I", "-S", str(app), "--bogus"], capture_output=True, text=True, env=env)
    assert usage.returncode == 64 and "usage error" in usage.stderr
    # and it reads this machine for real when given no report: it finishes and judges (no RDMA here)
    live = subprocess.run(
        [sys.executable, "-I", "-S", str(app), *common], capture_output=True, text=True, env=env, timeout=120
    )
    assert live.returncode in (0, 4) and live.stderr == "", live.stderr
    if os.geteuid() == 0:  # as root, it runs from its unpacked copy, where Python keeps the bytecode
        [unpacked] = cache.iterdir()
        assert unpacked.name == zipapp.sha256()[:16]
        assert list(unpacked.glob("rdmaprov/health/__pycache__/checks.*.pyc"))
        run_py = unpacked / "rdmaprov" / "nodecheck" / "run.py"
        size = run_py.stat().st_size
        run_py.write_text("raise SystemExit('the unpacked copy ran')".ljust(size - 1) + "\n")  # same size
        os.utime(run_py, (time.time() + 10, time.time() + 10))  # so Python does not take its old bytecode
        again = subprocess.run(
            [sys.executable, "-I", "-S", str(app), "--help"], capture_output=True, text=True, env=env
        )
        assert again.returncode == 1 and "the unpacked copy ran" in again.stderr
        # a copy that lost part of a file (a full disk, a clean-up) is unpacked anew, not run half;
        # an unpacking folder of a killed run goes once it is old, a recent one (a run now) stays
        run_py.write_text("raise SystemExit('the damaged copy ran')")
        killed, running = cache / "unpacking-killed", cache / "unpacking-now"
        killed.mkdir(), running.mkdir()
        os.utime(killed, (time.time() - 3600, time.time() - 3600))
        fixed = subprocess.run(
            [sys.executable, "-I", "-S", str(app), "--help"], capture_output=True, text=True, env=env
        )
        assert fixed.returncode == 0 and "usage" in fixed.stdout, fixed.stderr
        assert sorted(p.name for p in cache.iterdir()) == sorted([unpacked.name, running.name])
        assert run_py.stat().st_size == size


def test_rdmaprov_node_check_is_a_command_of_the_cli(tmp_path):
    from tests.conftest import rdmaprov

    proc = rdmaprov(
        "node-check",
        "--expectations",
        str(_write_expectations(tmp_path)),
        "--report-file",
        str(LAB_REPORT),
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert proc.returncode == 0 and proc.stdout.startswith("node1: healthy"), proc.stderr


def test_the_program_is_uploaded_only_when_its_sha256_differs():
    from rdmaprov.facts.files import FileDigest, FileSha256
    from rdmaprov.operations.files import shipped_file
    from tests.support.ops import commands

    data = zipapp.build()
    digest = zipapp.sha256()
    path = "/usr/local/lib/rdmaprov/node-check.pyz"
    fresh = commands(shipped_file, {FileSha256: FileDigest()}, path=path, data=data)
    assert fresh[0] == "mkdir -p /usr/local/lib/rdmaprov"
    assert fresh[1].startswith(f"upload {path}.rdmaprov-tmp:\n#!/usr/bin/python3 -IS\n")
    assert fresh[2].startswith(f"{{ echo '{digest}  {path}.rdmaprov-tmp' | sha256sum -c --quiet - || ")
    assert fresh[2].endswith(f"chmod 644 {path}.rdmaprov-tmp && mv -f {path}.rdmaprov-tmp {path}")
    same = FileDigest(digest, "644", "root", "root")
    assert commands(shipped_file, {FileSha256: same}, path=path, data=data) == []
    stale = FileDigest("0" * 64, "644", "root", "root")
    assert len(commands(shipped_file, {FileSha256: stale}, path=path, data=data)) == 3
    loose = FileDigest(digest, "666", "root", "root")
    assert commands(shipped_file, {FileSha256: loose}, path=path, data=data) == [
        f"chown root:root {path} && chmod 644 {path}"
    ]
    assert commands(shipped_file, {FileSha256: same}, path=path, data=None) == [f"rm -f {path}"]
    assert commands(shipped_file, {FileSha256: FileDigest()}, path=path, data=None) == []


def test_the_shipped_programs_fingerprint_is_its_sha256():
    from rdmaprov.engine.desired import fingerprint

    data = zipapp.build()
    assert fingerprint((), {"data": data}) == fingerprint((), {"data": bytes(data)})
    assert fingerprint((), {"data": data}) != fingerprint((), {"data": data + b"\n"})


def test_the_etiquette_ends_within_the_health_checks_time():
    # slurmd kills a HealthCheckProgram at 60 s: each scontrol call gets at most what is left
    import time

    from rdmaprov.slurm.drain import CheckOutcome, DrainLimits
    from rdmaprov.slurm.scontrol import BUDGET_S, TIMEOUT_S, Clock, SlurmUnavailable, etiquette

    assert Clock(time.monotonic()).call_timeout() == TIMEOUT_S and BUDGET_S < 60
    assert 1 < Clock(time.monotonic() - 1.5, budget_s=3).call_timeout() <= 1.5  # never past what is left
    # a shorter budget (26.05's HealthCheckTimeout below a 30 s interval: 29 s less 5) gives each call
    # a fifth of it, so that a drain's three calls and the settle still fit after a quick report
    short = Clock(time.monotonic(), budget_s=24)
    assert short.call_timeout() == pytest.approx(4.8, abs=0.01) and short.drain_needs_s == pytest.approx(15.4)
    assert Clock(time.monotonic(), budget_s=5).call_s == 2  # never under 2 s
    spent = Clock(time.monotonic() - BUDGET_S)
    with pytest.raises(SlurmUnavailable, match="no time left of the health check's 55 s"):
        spent.call_timeout()
    # a report that used up the time: Slurm is not even asked, nothing is drained, and it says so
    failing = CheckOutcome("node2", False, ("rdma.device_present rxe0: missing",))
    assert etiquette(failing, DrainLimits(True, 0.5), spent) == [
        "slurm: nothing done to node2: no time left of the health check's 55 s"
    ]
