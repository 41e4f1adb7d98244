"""Tables for facts, verification and gates."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rdmaprov.health.baselines import PartRecord
from rdmaprov.health.diagnose import Diagnosis
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.verify import HostVerification
from rdmaprov.parsers.node import NodeReport


def print_facts(reports: dict[str, NodeReport | Exception], unreachable: dict[str, str], console: Console) -> None:
    table = Table(title="RDMA facts")
    for column in (
        "host",
        "device/port",
        "state",
        "phys",
        "link layer",
        "rate",
        "MTU act/max",
        "GIDs (RoCE v2)",
        "fw",
        "netns",
        "memlock",
    ):
        table.add_column(column)
    for name, reason in unreachable.items():
        table.add_row(escape(name), "[red]unreachable[/]", escape(reason), *[""] * 8)
    for name, report in reports.items():
        if isinstance(report, Exception):
            table.add_row(escape(name), "[red]error[/]", escape(str(report)), *[""] * 8)
            continue
        if not report.ports:
            netns, memlock = Text(report.netns or ""), Text(report.memlock_login)
            table.add_row(Text(name), "no RDMA devices", *[""] * 7, netns, memlock)
        for port in report.ports:
            device = next((d for d in report.devices if d.hca == port.device), None)
            ib = next((p for p in device.ports if p.number == port.port), None) if device else None
            v2 = ", ".join(
                str(g.index) for g in sorted(port.gids.values(), key=lambda g: g.index) if g.type == "RoCE v2"
            )
            style = "green" if port.state == "ACTIVE" else "red"
            mtu = f"{ib.active_mtu}/{ib.max_mtu}" if ib else ""
            cells = (port.phys_state, port.link_layer, port.rate_text, mtu, v2)
            table.add_row(
                Text(name),
                Text(port.name),
                Text(port.state, style=style),
                *(Text(cell) for cell in cells),
                Text(device.fw_ver if device else ""),
                Text(report.netns or ""),
                Text(report.memlock_login),
            )
        for gpu in report.gpus:
            table.add_row(
                Text(name),
                Text(f"GPU {gpu.name}"),
                Text(f"sm {gpu.compute_cap}"),
                "",
                "",
                "",
                "",
                "",
                Text(f"driver {gpu.driver_version}"),
                "",
                "",
            )
        if report.nccl_version:
            table.add_row(
                Text(name),
                Text(f"NCCL {report.nccl_version}"),
                "",
                "",
                "",
                "",
                "",
                "",
                Text(", ".join(p.rsplit("/", 1)[-1] for p in report.nccl_plugins)),
                "",
                "",
            )
    console.print(table)


def print_verify(results: list[HostVerification], console: Console, verbose: bool = False) -> None:
    table = Table(title="verify")
    for column in ("host", "subject", "check", "expected", "found", "hint"):
        table.add_column(column)
    for host in results:
        if host.status == "unreachable" or host.error:
            table.add_row(escape(host.name), "", "[red]" + host.status + "[/]", "", escape(host.error or ""), "")
            continue
        # Unknowns are shown like failures: a check that could not be judged is not a pass.
        shown = host.findings if verbose else [f for f in host.findings if not f.ok or f.unknown]
        for f in shown:
            mark = "[yellow]unknown[/]" if f.unknown else "[green]ok[/]" if f.ok else "[red]FAIL[/]"
            kind = f" ({f.drift})" if f.drift else ""
            # what nodes report is data, never markup: `[h:mm]` stays, `:ab:` is no emoji
            cells = (escape(text) for text in (f.subject, f"{f.check}{kind}", f.expected, f.found, f.hint))
            subject, check, expected, found, hint = cells
            table.add_row(escape(host.name), subject, f"{mark} {check}", expected, found, hint)
        if not host.failures:
            unknown = sum(f.unknown for f in host.findings)
            judged = len(host.findings) - unknown
            table.add_row(
                Text(host.name),
                "",
                f"[green]all {judged} checks pass[/]" + (f", {unknown} unknown" if unknown else ""),
                "",
                "",
                "",
            )
    console.print(table)


def print_gates(results: list[GateResult], console: Console) -> None:
    if not results:
        return
    table = Table(title="gates")
    for column in ("gate", "between", "verdict", "measured", "why"):
        table.add_column(column)
    for gate in results:
        verdict = {"pass": "[green]PASS[/]", "warn": "[yellow]WARN[/]", "skipped": "SKIP"}.get(
            gate.status, "[red]FAIL[/]"
        )
        measured = f"{gate.measured:.4g} {gate.unit}" if gate.measured is not None else ""
        # reasons quote what nodes and programs printed: data, never markup (`[rank 0]` stays)
        table.add_row(
            Text(gate.gate),
            Text(str(gate.subject)),
            verdict,
            Text(measured),
            Text(gate.reason + (f" (attempt {gate.attempts})" if gate.attempts > 1 else "")),
        )
    console.print(table)


def print_gates_not_run(left_out: dict[str, str], console: Console) -> None:
    """One line per host the gates left out, with why, so that a gate missing from the table
    above (or a table missing altogether) is never silent."""
    for name, why in left_out.items():
        console.print(Text.assemble(("gates not run on ", "yellow"), (name, "bold yellow"), f": {why}"))


def print_diagnosis(diagnosis: Diagnosis, console: Console) -> None:
    """Suspects with their evidence first, then who was cleared."""
    table = Table(title=f"diagnosis ({diagnosis.rounds} round{'s' if diagnosis.rounds != 1 else ''} of pair tests)")
    for column in ("node", "verdict", "evidence"):
        table.add_column(column)
    for name, evidence in diagnosis.suspects.items():
        table.add_row(Text(name), "[red]SUSPECT[/]", Text("\n".join(evidence)))
    for name, why in diagnosis.undecided.items():
        table.add_row(Text(name), "[yellow]UNDECIDED[/]", Text(why))
    for name, why in diagnosis.lost.items():
        table.add_row(Text(name), "[red]LOST[/]", Text(why))
    for name in diagnosis.cleared:
        table.add_row(Text(name), "[green]cleared[/]", "")
    console.print(table)
    if diagnosis.advice:
        console.print(Text.assemble(("to settle it: ", "yellow"), diagnosis.advice))
    print_gates([t for t in diagnosis.tests if t.gate in ("rail", "node")], console)


def print_baselines(parts: dict[str, PartRecord], console: Console) -> None:
    """Each part's baseline (or how far its recording got) and its last figure."""
    table = Table(title="baselines")
    for column in ("gate", "part", "baseline", "runs", "since", "last"):
        table.add_column(column)
    for key, part in sorted(parts.items()):
        unit = part.get("unit", "")
        value = part.get("baseline")
        since = part.get("since")
        table.add_row(
            Text(part.get("gate", "")),
            Text(key.removeprefix(f"{part.get('gate', '')} ")),  # the subject, and what else the part is by
            f"{value:.4g} {unit}" if value is not None else "recording",
            str(len(part.get("samples", []))),
            datetime.fromtimestamp(since, timezone.utc).strftime("%Y-%m-%d %H:%M") if since else "",
            f"{part['last']:.4g} {unit}" if part.get("last") is not None else "",
        )
    console.print(table)
