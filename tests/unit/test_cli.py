"""The command line: every command's options (flags, help, defaults) and usage errors as users and
scripts rely on them, and the reports the CLI only prints: the lab's, the facts', verify's."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from rdmaprov import cli
from rdmaprov.errors import UserError
from rdmaprov.health.facts_report import FactsReport, read_facts
from rdmaprov.inventory import load_inventory
from rdmaprov.lab.lab import Lab, restart
from rdmaprov.lab.releases import HELP as RELEASE_HELP
from rdmaprov.lab.report import down_summary, status_exit_code, status_table, up_summary
from rdmaprov.parsers.node import parse_node_report
from rdmaprov.workflows.verify import verify
from tests.conftest import FIXTURES

LIMIT = "hosts, groups or globs (repeat or comma-separate)"
REPORT = (("--report",), "write the readiness report, one self-contained HTML page (docs/report.md)", None, "PATH")
TAGS = (("--tags", "-t"), "run only these deploys (repeat or comma-separate)", None, "DEPLOY")
RUN_OUTPUT = [
    (("--json",), "print the result as JSON (schemas/result.schema.json)", False, None),
    (("--diff",), "show file diffs (always shown by check)", False, None),
    (("--verbose", "-v"), "show every operation, pyinfra's log and paramiko's warnings", False, None),
    (("--junit",), "write verification and gate results as JUnit XML", None, "PATH"),
    REPORT,
]
NO_DIAGNOSE = (
    ("--no-diagnose",),
    "when a cluster gate fails, do not run the diagnosis (pair rounds) after it",
    False,
    None,
)
CONVERGE = [
    NO_DIAGNOSE,
    (("--skip-gates",), "verify after applying, but run no bandwidth gates", False, None),
    (("--skip-verify",), "neither verify nor gates after applying", False, None),
    (
        ("--allow-reboot",),
        "reboot hosts whose settings need it (netns mode), batch by batch, then verify them",
        False,
        None,
    ),
    (
        ("--serial",),
        "apply N hosts (or P%% of them) at a time, each batch verified before the next; "
        "also the reboot batch (default: all at once, reboots one at a time)",
        None,
        "N|P%",
    ),
    (("--max-fail",), "stop when more than P%% of a batch's hosts fail (the rest are reported not run)", None, "P%"),
]
INVENTORY = ("inventory", None, None, None)
GATES_VIA = (
    ("--gates-via",),
    "launch the gates' workloads over SSH (mpirun with a hostfile) or as Slurm jobs (srun); "
    "default: slurm when the inventory declares Slurm, else ssh",
    None,
    None,
)

# (flags or dest, help, default, metavar) of every argument, in the order --help lists them.
OPTIONS = {
    "validate": [INVENTORY],
    "apply": [INVENTORY, (("--limit", "-l"), LIMIT, None, "PATTERN"), TAGS, *RUN_OUTPUT, *CONVERGE, GATES_VIA],
    "check": [
        INVENTORY,
        (("--limit", "-l"), LIMIT, None, "PATTERN"),
        TAGS,
        *RUN_OUTPUT,
        NO_DIAGNOSE,
        GATES_VIA,
        (("--gates",), "also run the bandwidth gates", False, None),
        (("--skip-verify",), "only plan: do not check the facts (ports, MTU, netns…)", False, None),
        (
            ("--textfile",),
            "write drift metrics for node_exporter's textfile collector "
            "(e.g. /var/lib/node_exporter/textfile/rdmaprov.prom)",
            None,
            "PATH",
        ),
    ],
    "bootstrap": [
        INVENTORY,
        (("--limit", "-l"), f"{LIMIT}; for bootstrap: the new nodes", None, "PATTERN"),
        *RUN_OUTPUT,
        *CONVERGE,
        GATES_VIA,
        (
            ("--ask-pass",),
            "prompt once for the new nodes' SSH (and sudo) password; installs ssh.key's public half for later runs",
            False,
            None,
        ),
    ],
    "verify": [
        INVENTORY,
        (("--limit", "-l"), None, None, "PATTERN"),
        (
            ("--gates",),
            "also run the gates (node, ib_write_bw pairs, container, rails, latency, all_reduce, workload)",
            False,
            None,
        ),
        (
            ("--deep",),
            "DCGM's level 3 diagnostic on GPU nodes (about 15 min) instead of level 1 (seconds)",
            False,
            None,
        ),
        NO_DIAGNOSE,
        (("--json",), None, False, None),
        (("--junit",), "write the results as JUnit XML", None, "PATH"),
        REPORT,
        (("--verbose", "-v"), "show passing checks too", False, None),
        GATES_VIA,
    ],
    "facts": [
        INVENTORY,
        (("--limit", "-l"), None, None, "PATTERN"),
        (("--json",), None, False, None),
        (("--verbose", "-v"), None, False, None),
    ],
    "diagnose": [
        INVENTORY,
        (("--limit", "-l"), None, None, "PATTERN"),
        (("--json",), "print the diagnosis as JSON", False, None),
        REPORT,
        (("--verbose", "-v"), None, False, None),
        GATES_VIA,
    ],
    "report": [
        ("run", "a run's JSON, as --json printed it", None, "RUN.json"),
        (("--output", "-o"), "the HTML page to write", None, "PATH"),
    ],
    "node-check": [
        (
            ("--expectations",),
            "what this node must be, as the node_check deploy wrote it (default /etc/rdmaprov/node-check.json)",
            "/etc/rdmaprov/node-check.json",
            "PATH",
        ),
        (
            ("--state-dir",),
            "where port error counters are kept between checks (default /var/lib/rdmaprov/node-check)",
            "/var/lib/rdmaprov/node-check",
            "DIR",
        ),
        (
            ("--report-file",),
            "judge a node report captured earlier (the report command's output) instead of reading this node",
            None,
            "PATH",
        ),
        (
            ("--slurm",),
            "then drain this node in Slurm when it fails, resume it when rdmaprov drained it and it passes "
            "(Slurm's HealthCheckProgram: /usr/local/sbin/rdmaprov-slurm-health-check)",
            False,
            None,
        ),
        (("--json",), "print the outcome as JSON", False, None),
    ],
    "baseline": [
        INVENTORY,
        (("--limit", "-l"), LIMIT, None, "PATTERN"),
        (("--json",), "print the baselines as JSON", False, None),
        (("--reset",), "forget the baselines of the --limit nodes (all without --limit)", False, None),
    ],
    "exporter": [
        (("--listen",), "ADDR:PORT (default 0.0.0.0:9879)", "0.0.0.0:9879", None),
        (("--sysfs",), argparse.SUPPRESS, "/sys/class/infiniband", None),
    ],
    "lab": [(("--dir",), "lab state directory (default ~/.cache/rdmaprov/lab)", None, None)],
    "lab up": [
        (("--nodes",), "how many nodes (default: one per release named in --release, else 2)", None, None),
        (("--release",), f"{RELEASE_HELP} (default bookworm)", None, "RELEASE[,RELEASE...]"),
        (("--kind",), "default vm", None, None),
        (("--subnet",), "default 10.77.0.0/24", None, None),
        (("--bridge",), "default rdmaprov0", None, None),
        (("--memory",), "MiB per VM (default 1024)", None, None),
        (
            ("--from",),
            "boot copies of the nodes `lab save` kept in DIR, as they were saved (their subnet and bridge too: "
            "where the lab they came from is up, in a network namespace of their own)",
            None,
            "DIR",
        ),
    ],
    "lab save": [
        (("--to",), "a new or empty folder", None, "DIR"),
        ("nodes", "the nodes to save (default: every node)", None, "NODE"),
    ],
    "lab down": [],
    "lab status": [(("--json",), None, False, None)],
    "lab ssh": [("node", None, None, None), ("remote", None, None, None)],
}


def _command_parser(path: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    for name in path.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


@pytest.mark.parametrize("path", sorted(OPTIONS))
def test_every_command_keeps_its_options_help_and_defaults(path):
    parser = _command_parser(path)
    found = [
        (tuple(a.option_strings) or a.dest, a.help, a.default, a.metavar)
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
    ]
    assert found == OPTIONS[path]
    help_text = parser.format_help()
    for flags, *_ in OPTIONS[path]:
        if isinstance(flags, tuple) and flags != ("--sysfs",):
            assert flags[0] in help_text


@pytest.mark.parametrize(
    ("line", "expected", "handler"),
    [
        ("validate a.yaml b.yaml", {"inventory": ["a.yaml", "b.yaml"]}, cli._cmd_validate),
        (
            "apply inv.yaml",
            {
                "inventory": "inv.yaml",
                "limit": None,
                "tags": None,
                "json": False,
                "diff": False,
                "verbose": False,
                "junit": None,
                "report": None,
                "no_diagnose": False,
                "skip_gates": False,
                "skip_verify": False,
                "allow_reboot": False,
                "serial": None,
                "max_fail": None,
                "gates_via": None,
            },
            cli._cmd_apply,
        ),
        (
            "apply inv.yaml -l a,b --limit c -t nccl --tags mtu --json --diff -v --junit j.xml --skip-gates "
            "--skip-verify --no-diagnose "
            "--allow-reboot --serial 25% --max-fail 10%",
            {
                "inventory": "inv.yaml",
                "limit": ["a,b", "c"],
                "tags": ["nccl", "mtu"],
                "json": True,
                "diff": True,
                "verbose": True,
                "junit": "j.xml",
                "report": None,
                "no_diagnose": True,
                "skip_gates": True,
                "skip_verify": True,
                "allow_reboot": True,
                "serial": "25%",
                "max_fail": "10%",
                "gates_via": None,
            },
            cli._cmd_apply,
        ),
        (
            "check inv.yaml --gates --skip-verify --textfile t.prom -l x",
            {
                "inventory": "inv.yaml",
                "limit": ["x"],
                "tags": None,
                "json": False,
                "diff": False,
                "verbose": False,
                "junit": None,
                "report": None,
                "no_diagnose": False,
                "gates": True,
                "skip_verify": True,
                "textfile": "t.prom",
                "gates_via": None,
            },
            cli._cmd_check,
        ),
        (
            "bootstrap inv.yaml -l n1 --ask-pass --serial 1",
            {
                "inventory": "inv.yaml",
                "limit": ["n1"],
                "json": False,
                "diff": False,
                "verbose": False,
                "junit": None,
                "report": None,
                "no_diagnose": False,
                "skip_gates": False,
                "skip_verify": False,
                "allow_reboot": False,
                "serial": "1",
                "max_fail": None,
                "gates_via": None,
                "ask_pass": True,
            },
            cli._cmd_bootstrap,
        ),
        (
            "verify inv.yaml --gates --deep --no-diagnose --json --junit p --report r.html -v -l a --gates-via slurm",
            {
                "inventory": "inv.yaml",
                "limit": ["a"],
                "gates": True,
                "deep": True,
                "no_diagnose": True,
                "json": True,
                "junit": "p",
                "report": "r.html",
                "verbose": True,
                "gates_via": "slurm",
            },
            cli._cmd_verify,
        ),
        (
            "diagnose inv.yaml --report d.html",
            {
                "inventory": "inv.yaml",
                "limit": None,
                "json": False,
                "report": "d.html",
                "verbose": False,
                "gates_via": None,
            },
            cli._cmd_diagnose,
        ),
        ("report run.json -o page.html", {"run": "run.json", "output": "page.html"}, cli._cmd_report),
        (
            "facts inv.yaml --json -v",
            {"inventory": "inv.yaml", "limit": None, "json": True, "verbose": True},
            cli._cmd_facts,
        ),
        (
            "node-check --expectations e.json --slurm",
            {
                "expectations": "e.json",
                "state_dir": "/var/lib/rdmaprov/node-check",
                "report_file": None,
                "slurm": True,
                "json": False,
            },
            cli._cmd_node_check,
        ),
        ("exporter --listen 1.2.3.4:5", {"listen": "1.2.3.4:5", "sysfs": "/sys/class/infiniband"}, cli._cmd_exporter),
        (
            "lab --dir /x up --nodes 3 --kind container --subnet 10.0.0.0/24 --bridge br --memory 512",
            {
                "dir": "/x",
                "lab_command": "up",
                "nodes": 3,
                "release": None,
                "kind": "container",
                "subnet": "10.0.0.0/24",
                "bridge": "br",
                "memory": 512,
                "saved": None,
            },
            cli._cmd_lab_up,
        ),
        (
            "lab up --from /saved",
            {
                "dir": None,
                "lab_command": "up",
                "nodes": None,
                "release": None,
                "kind": None,
                "subnet": None,
                "bridge": None,
                "memory": None,
                "saved": "/saved",
            },
            cli._cmd_lab_up,
        ),
        (
            "lab --dir /x save --to /saved node1 node2",
            {"dir": "/x", "lab_command": "save", "to": "/saved", "nodes": ["node1", "node2"]},
            cli._cmd_lab_save,
        ),
        ("lab down", {"dir": None, "lab_command": "down"}, cli._cmd_lab_down),
        ("lab status --json", {"dir": None, "lab_command": "status", "json": True}, cli._cmd_lab_status),
        (
            "lab ssh node1 uname -a",
            {"dir": None, "lab_command": "ssh", "node": "node1", "remote": ["uname", "-a"]},
            cli._cmd_lab_ssh,
        ),
    ],
)
def test_command_lines_parse_as_before(line, expected, handler):
    args = vars(cli.build_parser().parse_args(line.split()))
    assert args.pop("command") == line.split()[0]
    assert args.pop("handler") is handler
    assert args == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "the following arguments are required: COMMAND"),
        ("nosuch", "invalid choice: 'nosuch'"),
        ("apply", "the following arguments are required: inventory"),
        ("bootstrap inv.yaml -t x", "unrecognized arguments: -t x"),
        ("check inv.yaml --serial 1", "unrecognized arguments: --serial 1"),
        ("verify inv.yaml --diff", "unrecognized arguments: --diff"),
        ("lab", "the following arguments are required: ACTION"),
        ("lab up --kind x", "argument --kind: invalid choice: 'x'"),
        ("lab up --nodes x", "argument --nodes: invalid int value: 'x'"),
        ("lab save node1", "the following arguments are required: --to"),
        ("report run.json", "the following arguments are required: --output/-o"),
    ],
)
def test_usage_errors_exit_64_at_every_level(line, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args(line.split())
    assert info.value.code == cli.EXIT_USAGE == 64
    stderr = capsys.readouterr().err
    assert stderr.startswith("usage: rdmaprov")
    assert message in stderr and stderr.endswith("(exit 64: usage error)\n")


def test_main_returns_validate_outcome_without_going_online(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("cluster: {name: c}\nhosts:\n  a: {address: 10.0.0.1}\n")
    assert cli.main(["validate", str(good)]) == 0
    assert f"{good}: ok (1 hosts" in capsys.readouterr().out
    assert cli.main(["validate", str(tmp_path / "missing.yaml")]) == cli.EXIT_INVALID


def _rendered(renderable) -> str:
    """What the CLI prints when piped (wide, no colours), whatever FORCE_COLOR says."""
    buffer = io.StringIO()
    Console(file=buffer, soft_wrap=True, width=200, force_terminal=False).print(renderable)
    return buffer.getvalue()


LAB_ROWS = [
    {
        "name": "node1",
        "kind": "vm",
        "address": "10.77.0.10",
        "pid": 4242,
        "running": True,
        "ssh": True,
        "kernel": None,
        "nic": None,
    },
    {
        "name": "node2",
        "kind": "container",
        "address": "10.77.0.11",
        "pid": None,
        "running": False,
        "ssh": False,
        "kernel": None,
        "nic": None,
    },
]


def test_lab_status_table_and_exit_code():
    assert _rendered(status_table(Path("/tmp/lab-x"), LAB_ROWS)) == (
        "lab /tmp/lab-x\n"
        "┏━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━┳━━━━━┓\n"
        "┃ name  ┃ kind      ┃ address    ┃ pid  ┃ running ┃ ssh   ┃ kernel ┃ nic ┃\n"
        "┡━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━╇━━━━━┩\n"
        "│ node1 │ vm        │ 10.77.0.10 │ 4242 │ True    │ True  │        │     │\n"
        "│ node2 │ container │ 10.77.0.11 │      │ False   │ False │        │     │\n"
        "└───────┴───────────┴────────────┴──────┴─────────┴───────┴────────┴─────┘\n"
    )
    assert status_exit_code(LAB_ROWS) == 4
    assert status_exit_code(LAB_ROWS[:1]) == 0
    assert status_exit_code([{**LAB_ROWS[0], "ssh": False}]) == 4


def test_lab_status_without_a_lab():
    assert _rendered(status_table(Path("/tmp/lab-x"), [])) == "no lab running from /tmp/lab-x\n"
    assert status_exit_code([]) == 0


def test_lab_up_and_down_summaries(tmp_path):
    # a lab state written before releases existed reads as Debian 12
    old = {"name": "node1", "address": "10.77.0.10", "prefixlen": 24, "kind": "vm", "workdir": str(tmp_path / "node1")}
    nodes = [old, {**old, "name": "node2", "release": "bookworm"}, {**old, "name": "node3", "release": "trixie"}]
    state = {
        "kind": "vm",
        "nodes": nodes,
        "timings": {"image_s": 12.4, "mirror_s": 3.6, "boot_to_ssh_s": 40.5, "total_s": 57.2},
    }
    lab = Lab(tmp_path, state)  # its nodes have no PID: no memory to count
    assert [node.release for node in lab.nodes()] == ["bookworm", "bookworm", "trixie"]
    assert up_summary(lab, state) == [
        "lab up: 3 vm nodes (Debian 12 ×2, Debian 13 ×1) in 57s (image 12s, mirror 4s, boot to SSH 40s), "
        "nodes' memory 0 MiB",
        f"inventory: {tmp_path}/inventory.yaml  (next: rdmaprov apply {tmp_path}/inventory.yaml)",
    ]
    assert down_summary(["node1", "rdmaprov0"]) == "lab down: removed node1, rdmaprov0"
    assert down_summary([]) == "lab down: removed nothing (no lab running)"


def test_facts_report_json_and_exit_code():
    report = parse_node_report((FIXTURES / "lab" / "node_report_rxe.txt").read_text())
    facts = FactsReport(
        {"n1": report, "n2": RuntimeError("cat: /sys/class/infiniband: Permission denied")},
        {"n3": "Could not connect (timed out)"},
    )
    doc = json.loads(json.dumps(facts.to_json()))
    assert list(doc) == ["n1", "n2", "n3"]
    assert doc["n1"] == json.loads(json.dumps(asdict(report)))
    assert (doc["n1"]["netns"], doc["n1"]["ports"][0]["device"]) == ("exclusive", "rxe0")
    assert doc["n2"] == {"error": "cat: /sys/class/infiniband: Permission denied"}
    assert doc["n3"] == {"unreachable": "Could not connect (timed out)"}
    assert facts.exit_code == 4
    assert FactsReport({"n1": report}, {}).exit_code == 0
    assert FactsReport({"n1": report}, {"n3": "refused"}).exit_code == 4
    assert FactsReport({"n2": RuntimeError("x")}, {}).exit_code == 4


@pytest.fixture
def unreachable_inventory(tmp_path):
    """One host on a loopback port nothing listens on: connecting fails at once, for real."""
    path = tmp_path / "inv.yaml"
    path.write_text("cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\nhosts:\n  a: {address: 127.0.0.1}\n")
    return load_inventory(path)


def test_read_facts_reports_an_unreachable_host(unreachable_inventory):
    facts = read_facts(unreachable_inventory, ["a"])
    assert facts.reports == {}
    assert list(facts.unreachable) == ["a"]
    assert facts.exit_code == 4
    assert list(facts.to_json()["a"]) == ["unreachable"]


@pytest.mark.parametrize("command", ["check", "verify", "facts", "diagnose"])
def test_online_commands_report_an_unreachable_host_as_json_with_exit_4(command, unreachable_inventory, capsys):
    """Each command that goes online, from the command line to its JSON, with a host that refuses."""
    assert cli.main([command, str(unreachable_inventory.path), "--json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    assert "Could not connect" in json.dumps(doc)


def test_verify_workflow_result(unreachable_inventory):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    result = verify(unreachable_inventory, ["a"], gates=True)
    started = datetime.fromisoformat(result.started_at)
    assert before <= started <= datetime.now(timezone.utc) and started.utcoffset() == timedelta(0)
    assert (result.command, result.inventory, result.cluster) == ("verify", str(unreachable_inventory.path), "c")
    assert result.hosts == [] and result.duration_s > 0
    assert [(v.name, v.status) for v in result.verify] == [("a", "unreachable")]
    assert result.gates and not any(g.passed for g in result.gates)  # no gate passes across a host it cannot reach
    assert result.exit_code == 4
    doc = result.to_json()
    assert (doc["command"], doc["exit_code"], doc["verify"][0]["status"]) == ("verify", 4, "unreachable")


def test_lab_restart_names_what_it_cannot_restart(tmp_path):
    """Only a lab's own VMs boot again: a container is refused with what to do instead, as are an
    unknown name (with the lab's nodes) and a VM booted without its command line recorded;
    nothing is stopped (no PID recorded here: nothing could be)."""
    node = {"name": "node1", "address": "10.77.0.10", "prefixlen": 24, "workdir": str(tmp_path / "n1"), "pid": None}
    state = {"kind": "container", "nodes": [{**node, "kind": "container", "link": "rdmaprov0c1"}]}
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(UserError, match=r"restart boots VMs again; node1 is a container: `rdmaprov lab down`, then up"):
        restart(Lab(tmp_path), ["node1"])
    with pytest.raises(UserError, match=r"no lab node 'node7' in .* \(nodes: node1\)"):
        restart(Lab(tmp_path), ["node7"])
    state = {"kind": "vm", "nodes": [{**node, "kind": "vm", "link": "rdmaprov0t1"}]}
    (tmp_path / "state.json").write_text(json.dumps(state))
    with pytest.raises(UserError, match=r"node1 booted by an older rdmaprov \(no qemu.args\): `rdmaprov lab down`"):
        restart(Lab(tmp_path), ["node1"])


def test_json_documents_are_printed_as_json_dumps_gives_them(capsys):
    """--json output is written piece by piece as it is encoded (a 2,000-node verify prints
    116 MB, which json.dumps held six times over): the bytes are json.dumps's, past the pieces
    that are written at once."""
    from rdmaprov.report.output import print_json

    finding = {"host": "node1", "ok": True, "found": "µs ±1", "drift": None, "measured": 0.1 + 0.2, "n": 3}
    doc = {"verify": [{"host": f"node{h}", "findings": [dict(finding, subject=f"gpu{i}") for i in range(200)]}
                      for h in range(8)], "empty": [], "nested": {}}  # fmt: skip
    print_json(doc)
    assert capsys.readouterr().out == json.dumps(doc, indent=2) + "\n"


def test_an_apply_whose_cluster_gate_failed_prints_its_diagnosis_after_the_gates():
    """What a user reads after `apply` when all_reduce fell short: the gates, then the diagnosis
    (who is suspect with its evidence, who was cleared) with how to skip it, then the exit code."""
    from rdmaprov.engine.results import RunResult
    from rdmaprov.health.diagnose import localize
    from rdmaprov.health.gates.result import GateResult
    from rdmaprov.health.gates.subject import Subject

    all_reduce = GateResult("all_reduce", Subject.parse("a,b,c"), False, "busbw 2 GB/s < 1000 GB/s", 2.0, 1000.0)
    diagnosis = localize(
        ["a", "b", "c"],
        lambda pairs: [GateResult("ib_write_bw", Subject.pair(x, y), "b" not in (x, y), "2 Gb/s") for x, y in pairs],
    )
    result = RunResult("apply", "inv.yaml", "c", "2026-01-01T00:00:00+00:00", 1.0, [], [], [all_reduce])
    result.diagnosis = diagnosis
    buffer = io.StringIO()
    args = argparse.Namespace(json=False, verbose=False, junit=None, report=None)
    code = cli._finish(result, args, Console(file=buffer, width=200, force_terminal=False))
    text = buffer.getvalue()
    assert code == 4 and text.rstrip().endswith("exit 4"), text
    gates, told = text.index("all_reduce"), text.index("a cluster gate failed: diagnosis (--no-diagnose to skip)")
    assert gates < told < text.index("SUSPECT") < text.index("cleared"), text
    assert [line.split()[1] for line in text.splitlines() if "SUSPECT" in line] == ["b"], text
