"""The end-of-run report: per-host summary table, then details of what changed or failed."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rdmaprov.engine.results import RunResult

_STYLE = {
    "changed": "yellow",
    "unchanged": "green",
    "failed": "red",
    "unreachable": "red",
    "skipped": "red",
    "interrupted": "red",
}

# Host states the summary line counts only when some host is in them: hosts a --max-fail stop never
# reached, and hosts a Ctrl-C stopped (each is in the table; the line must not read as nothing done).
_ONLY_IF_ANY = {"skipped": "not run", "interrupted": "interrupted"}


def _print_failure(console: Console, error: str, op: str, output: list[str]) -> None:
    """A failed operation's last lines; where its connection was lost, first that (the output is
    then only what the node printed before, e.g. debconf's notes, and never the cause)."""
    if error.startswith(f"{op} failed: connection lost"):
        console.print(f"    {error}", markup=False, highlight=False)
        if output:
            console.print("    its output before the connection was lost:", markup=False, highlight=False)
    for line in output:
        console.print(f"    {line}", markup=False, highlight=False)


def print_run(result: RunResult, console: Console, show_diff: bool = True) -> None:
    pending = result.command == "check"
    for host in result.hosts:
        for op in host.ops:
            if op.status in ("changed", "would_change", "failed"):
                verb = {"changed": "changed", "would_change": "would change", "failed": "FAILED"}[op.status]
                if op.drift:
                    verb += f" ({op.drift})"
                colour = "red" if op.status == "failed" else "yellow"
                console.print(f"[{colour}]{host.name}[/]: {op.name}: {verb}")
                if op.diff and show_diff:
                    console.print(op.diff.rstrip("\n"), markup=False, highlight=False)
                if op.status == "failed":
                    _print_failure(console, host.error or "", op.name, (op.stderr or op.stdout)[-5:])
        for warning in host.warnings:
            console.print(f"[magenta]{host.name}[/]: warning: {warning}", highlight=False)
        if pending and host.inputs_changed:
            console.print(
                f"[yellow]{host.name}[/]: inventory changed since the last apply ({host.last_applied}) for: "
                f"{', '.join(host.inputs_changed)}",
                highlight=False,
            )
        for reason in host.reboot_required:
            console.print(f"[yellow]{host.name}[/]: reboot required: {reason}", highlight=False)

    table = Table(title=f"rdmaprov {result.command} — {result.cluster} ({result.duration_s:.1f}s)")
    table.add_column("host")
    table.add_column("address")
    table.add_column("status")
    table.add_column("would change" if pending else "changed", justify="right")
    table.add_column("ops", justify="right")
    table.add_column("error")
    for host in result.hosts:
        style = _STYLE[host.status]
        status = "drift" if pending and host.status == "changed" else host.status
        table.add_row(
            escape(host.name),
            escape(host.address),
            f"[{style}]{status}[/]",
            str(host.changed),
            str(len(host.ops)),
            escape(host.error or ""),
        )
    console.print(table)
    summary = result.summary()
    console.print(
        f"{summary['hosts']} hosts: {summary['changed']} {'with drift' if pending else 'changed'}, "
        f"{summary['unchanged']} unchanged, {summary['failed']} failed, {summary['unreachable']} unreachable"
        + "".join(f", {summary[status]} {words}" for status, words in _ONLY_IF_ANY.items() if summary.get(status))
        + f" — exit {result.exit_code}"
    )
