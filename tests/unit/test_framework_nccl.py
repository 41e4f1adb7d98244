"""The framework's own NCCL: the probe run for real by interpreters of this machine, its answer
read, and the finding when a job's PyTorch loads another NCCL than the one the gates verified."""

from __future__ import annotations

import subprocess
import sys

from rdmaprov.facts.node_report import frameworks_command, node_report_command
from rdmaprov.health.findings import Checker
from rdmaprov.health.framework_checks import check_frameworks
from rdmaprov.nodecheck.run import report_command
from rdmaprov.parsers.framework import FrameworkNccl, nccl_version_text, parse_frameworks
from rdmaprov.parsers.node import NodeReport
from tests.support.inventories import lab_host, node_config, problems, write

VENV = "/opt/venv/bin/python"
WHEEL_NCCL = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"


def _findings(node: dict, frameworks: dict[str, FrameworkNccl], libraries: list[str] | None = None):
    c = Checker("gpu1", node.get("fabric"))
    check_frameworks(c, node_config(node), NodeReport(frameworks=frameworks, nccl_libraries=libraries or []))
    return [(f.subject, f.ok, f.found) for f in c.findings]


def test_the_probe_runs_in_each_interpreter_and_says_what_it_could_not():
    """This machine's Python has no PyTorch: the probe says so in its own line; a path that is no
    interpreter is `missing`. Both are findings naming the interpreter."""
    command = frameworks_command((sys.executable, "/nonexistent/bin/python"))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120)
    found = parse_frameworks(out.stdout.splitlines())
    assert found["/nonexistent/bin/python"] == FrameworkNccl("/nonexistent/bin/python", present=False)
    mine = found[sys.executable]
    assert mine.present and mine.error == "ModuleNotFoundError: No module named 'torch'", out.stdout
    findings = _findings({"fabric": "roce", "nccl": {"version": "2.18.3-1"}}, found)
    assert findings == []  # none declared: nothing judged
    declared = {"fabric": "roce", "nccl": {"version": "2.18.3-1", "frameworks": [sys.executable, "/x/python"]}}
    assert _findings(declared, found | {"/x/python": FrameworkNccl("/x/python", present=False)}) == [
        (sys.executable, False, "cannot tell: ModuleNotFoundError: No module named 'torch'"),
        ("/x/python", False, "no such interpreter"),
    ]


def test_the_report_reads_frameworks_only_where_declared_and_never_in_a_health_check():
    assert "rdmaprov-framework" not in node_report_command()
    assert "rdmaprov-framework" in node_report_command(frameworks=(VENV,))
    spec = lab_host(nccl={"frameworks": [VENV]})
    assert spec.node.nccl.frameworks == (VENV,) and "rdmaprov-framework" not in report_command(spec)


def test_torch_s_nccl_version_in_either_form():
    assert nccl_version_text([2, 20, 5]) == "2.20.5"  # PyTorch 2: a tuple
    assert nccl_version_text(21803) == "2.18.3"  # NCCL_VERSION_CODE from 2.9 on
    assert nccl_version_text(2708) == "2.7.8"  # before 2.9
    assert nccl_version_text(None) is None


def test_a_wheel_s_nccl_other_than_the_verified_one_is_named_with_its_path():
    answer = 'rdmaprov-framework {"torch": "2.3.1+cu121", "nccl": [2, 20, 5], "libraries": ["' + WHEEL_NCCL + '"]}'
    found = parse_frameworks(["python " + VENV, "Warning: something torch printed", answer])
    assert found[VENV].nccl_version == "2.20.5" and found[VENV].libraries == (WHEEL_NCCL,)
    node = {"fabric": "roce", "nccl": {"version": "2.18.3-1", "frameworks": [VENV]}}
    [(subject, ok, said)] = _findings(node, found)
    assert (subject, ok) == (VENV, False)
    assert said == f"PyTorch 2.3.1+cu121 loads NCCL 2.20.5 ({WHEEL_NCCL})"
    same = {"fabric": "roce", "nccl": {"version": "2.20.5-1", "frameworks": [VENV]}}
    assert _findings(same, found)[0][1] is True
    # nothing declared: the node's own libnccl is what the gates ran
    undeclared = {"fabric": "roce", "nccl": {"frameworks": [VENV]}}
    assert _findings(undeclared, found, ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.20.5"])[0][1] is True
    assert _findings(undeclared, found, ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3"])[0][1] is False


def test_on_erdma_with_aiacc_the_plugin_must_load_in_the_environment():
    answer = (
        'rdmaprov-framework {"torch": "2.1.0", "nccl": 21805, "libraries": [], '
        '"plugin_error": "libnccl-net.so: cannot open shared object file: No such file or directory"}'
    )
    found = parse_frameworks(["python " + VENV, answer])
    node = {
        "fabric": "erdma",
        "erdma": {"aiacc_plugin": "1.0.2"},
        "nccl": {"version": "2.18.5-1", "frameworks": [VENV]},
    }
    assert _findings(node, found) == [
        (VENV, True, "PyTorch 2.1.0 loads NCCL 2.18.5 (linked into PyTorch)"),
        (
            f"{VENV} net plugin",
            False,
            "not loaded: libnccl-net.so: cannot open shared object file: No such file or directory",
        ),
    ]


def test_a_framework_path_must_be_absolute(tmp_path):
    text = "cluster: {name: c}\ndefaults: {nccl: {frameworks: [venv/bin/python]}}\nhosts:\n  n1: {address: 10.0.0.1}\n"
    [problem] = problems(write(tmp_path, text))
    assert "nccl.frameworks[0]" in problem and "absolute path of a Python interpreter" in problem


def test_the_lab_node_declares_none():
    assert lab_host().node.nccl.frameworks == ()
