"""`rdmaprov status` on the terminal: the count per status first, then one row per node that is not
in service (healthy nodes are counted, not listed: at 2,000 nodes the rows that matter must not
scroll away), with `--all` every node."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rdmaprov.slurm.status import FleetStatus, counts


def print_status(result: FleetStatus, console: Console, every: bool = False) -> None:
    if not result.source:
        for host, why in result.unread.items():
            console.print(f"[red]{escape(host)}[/]: Slurm not read: {escape(why)}", highlight=False)
        console.print(f"the fleet's state could not be read from Slurm — exit {result.exit_code}", highlight=False)
        return
    now = result.now()
    shown = result.nodes if every else [n for n in result.nodes if n.status != "healthy"]
    if shown:
        table = Table(title=f"rdmaprov status — {result.cluster}, from Slurm on {result.source} at {result.read_at}")
        for column in ("host", "Slurm node", "status", "Slurm state", "reason", "since"):
            table.add_column(column)
        for node in shown:
            colour = "red" if node.failing else "green" if node.status == "healthy" else "yellow"
            since = f"{node.since} ({node.age(now)} ago)" if node.since else ""
            cells = (escape(text) for text in (node.host, node.slurm_name, node.state, node.reason, since))
            host, name, state, reason, since = cells
            table.add_row(host, name, f"[{colour}]{node.status}[/]", state, reason, since)
        console.print(table)
    found = {status: n for status, n in counts(result.nodes).items() if n}
    summary = ", ".join(f"{n} {status}" for status, n in found.items()) or "no Slurm node selected"
    console.print(f"{len(result.nodes)} nodes: {summary} — exit {result.exit_code}", highlight=False)
