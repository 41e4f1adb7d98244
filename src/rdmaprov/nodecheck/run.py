"""Run verify's per-node checks on this node: read the node report with the very command verify
sends over SSH, judge it with the same checks (health/checks.py, gpu_checks.py, counters.py)
against the expectations file, print one line per failure, exit 0 healthy / 4 failing.

verify's report runs inside an SSH login, where pam_limits has set the memlock limit a login
gets; here, run as root, the report goes through `runuser` (a PAM session with pam_limits, no
login shell), so `limits.memlock_login` judges the same limit whether node-check runs from a
shell or from slurmd. What verify checks across nodes (fleet consistency) or from the control
machine (the exporter answering) is not a node's own check and is left to verify.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rdmaprov.errors import Problem, UsageParser, UserError
from rdmaprov.facts.node_report import node_report_command
from rdmaprov.health.checks import report_arguments, verify_node
from rdmaprov.health.counters import counter_checks, counter_findings, load_reads, save_reads
from rdmaprov.health.findings import Finding
from rdmaprov.inventory.model import HostSpec
from rdmaprov.nodecheck import expectations
from rdmaprov.nodecheck.expectations import Expectations
from rdmaprov.nodecheck.options import DESCRIPTION, add_arguments
from rdmaprov.parsers.node import NodeReport, parse_node_report
from rdmaprov.paths import SYSTEM_PATH
from rdmaprov.slurm.drain import DrainLimits
from rdmaprov.slurm.scontrol import BUDGET_S, Clock, etiquette, outcome_of

EXIT_HEALTHY, EXIT_FAILING = 0, 4


class ReportFailed(Exception):
    """The node report could not be read (it hung past its deadline, or could not start)."""


def report_command(spec: HostSpec) -> str:
    """The node report verify reads, but for the framework interpreters and the NICs' firmware
    settings: importing PyTorch and querying each NIC's firmware take seconds of a health check's
    budget, and neither which NCCL an environment loads nor a firmware setting changes between
    checks (verify reads them)."""
    arguments = report_arguments(spec)
    arguments["frameworks"] = ()
    arguments["qos_firmware"] = False
    return node_report_command(**arguments)


def read_report(timeout_s: int, spec: HostSpec) -> NodeReport:
    """The node report (report_command); ReportFailed past `timeout_s` (the whole process group
    is killed: a hung nvidia-smi must not outlive the check)."""
    command = report_command(spec)
    if os.geteuid() == 0 and shutil.which("runuser", path=SYSTEM_PATH):
        argv = ["runuser", "-s", "/bin/sh", "-c", command, "root"]
    else:
        argv = ["/bin/sh", "-c", command]
    env = dict(os.environ, PATH=SYSTEM_PATH)
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True
        )
    except OSError as exc:
        raise ReportFailed(f"could not start {argv[0]}: {exc.strerror}") from None
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ReportFailed(f"did not finish within {timeout_s} s (a hung tool: nvidia-smi, ibv_devinfo?)") from None
    return parse_node_report(output)


def captured_report(path: str) -> NodeReport:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_node_report(handle.read())
    except OSError as exc:
        raise UserError(f"--report-file {path}: cannot be read ({exc.strerror})") from None


def judge(expected: Expectations, report: NodeReport, state_dir: str | None, now: float) -> list[Finding]:
    """verify's findings for this node; port error counters against this node's previous read,
    kept in `state_dir` (None: not kept, so counters only record a baseline)."""
    host = expected.host
    findings = verify_node(host, report)
    if not report.counters:
        return findings
    path = Path(state_dir) / "counters.json" if state_dir else None
    reads = load_reads(path) if path else {}
    findings += counter_findings(
        host.name,
        host.node.fabric,
        now,
        report.counters,
        reads.get(host.name),
        report.boot_id,
        counter_checks(host.node),
    )
    if path:
        try:
            save_reads(path, {host.name: {"at": now, "boot": report.boot_id, "ports": report.counters}})
        except OSError as exc:
            print(f"rdmaprov node-check: cannot keep counter reads in {path}: {exc.strerror}", file=sys.stderr)
    return findings


def failure_line(f: Finding) -> str:
    """`check-id subject: found (expected …)`: one failure on one line, as Slurm logs it."""
    return f"{f.id} {f.subject}: {f.found} (expected {f.expected})"


@dataclass
class Outcome:
    """What one node-check found: its failures (or why the report could not be read)."""

    host: str
    findings: list[Finding] = field(default_factory=list)
    report_error: str | None = None
    duration_s: float = 0.0
    slurm: list[str] = field(default_factory=list)  # what the Slurm etiquette did, one line each

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    @property
    def healthy(self) -> bool:
        return self.report_error is None and not self.failures

    def lines(self) -> list[str]:
        lines = [failure_line(f) for f in self.failures]
        if self.report_error:
            lines.insert(0, f"node-check.report {self.host}: {self.report_error} (expected a node report)")
        return lines + self.slurm

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "healthy": self.healthy,
            "report_error": self.report_error,
            "duration_s": round(self.duration_s, 3),
            "findings": [asdict(f) for f in self.findings],
            "slurm": self.slurm,
        }


def check_node(expected: Expectations, state_dir: str | None, report_file: str | None = None) -> Outcome:
    """The checks on this node's report (or on a captured one, `report_file`)."""
    started = time.monotonic()
    outcome = Outcome(expected.host.name)
    try:
        report = (
            read_report(expected.report_timeout_s, expected.host)
            if report_file is None
            else captured_report(report_file)
        )
    except ReportFailed as exc:
        outcome.report_error = str(exc)
    else:
        outcome.findings = judge(expected, report, state_dir, time.time())
    outcome.duration_s = time.monotonic() - started
    return outcome


def slurm_etiquette(expected: Expectations, outcome: Outcome, clock: Clock) -> list[str]:
    """Drain or resume this node in Slurm as its outcome asks (slurm/drain.py's rules), within
    what is left of the health check's time."""
    side = expected.slurm
    if side is None:
        raise UserError(
            Problem(
                expected.path,
                "--slurm, but these expectations have no slurm section",
                fix="enable cluster.slurm in the inventory and run `rdmaprov apply`",
            )
        )
    failures = [f"{f.id} {f.subject}: {f.found}" for f in outcome.failures]
    if outcome.report_error:
        failures.insert(0, f"node-check.report: {outcome.report_error}")
    verdict = outcome_of(side.node_name, failures, conclusive=outcome.report_error is None)
    return etiquette(verdict, DrainLimits(side.drain, side.max_drain_fraction), clock)


def node_check(args: argparse.Namespace) -> int:
    """Check this node; print one line per failure (or a one-line all-clear); 0 healthy, 4 failing."""
    started = time.monotonic()
    expected = expectations.load(args.expectations)
    clock = Clock(started, expected.slurm.budget_s if expected.slurm else BUDGET_S)
    outcome = check_node(expected, args.state_dir, args.report_file)
    if args.slurm:
        outcome.slurm = slurm_etiquette(expected, outcome, clock)
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2))
    elif outcome.healthy:
        print(f"{outcome.host}: healthy ({len(outcome.findings)} checks in {outcome.duration_s:.1f} s)")
        print("\n".join(outcome.slurm), end="\n" if outcome.slurm else "")
    else:
        print("\n".join(outcome.lines()))
    return EXIT_HEALTHY if outcome.healthy else EXIT_FAILING


def main(argv: list[str] | None = None) -> int:
    """The zipapp's entry point (no rich, no pyinfra: the node's bare python3)."""
    parser = UsageParser(prog="rdmaprov-node-check", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return node_check(args)
    except UserError as exc:
        for problem in exc.problems:
            print(f"error: {problem.format()}", file=sys.stderr)
        return exc.exit_code
