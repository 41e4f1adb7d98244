"""Live progress on stderr while a run goes on: phase, hosts done, the operation just finished."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn


class RichObserver:
    """Implements the engine's Observer protocol with a rich progress bar per phase."""

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task: TaskID | None = None
        self.ops = 0

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def phase(self, name: str, total: int) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(name, total=total, current="")

    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None:
        if self.task is not None and phase != "check":
            self.progress.advance(self.task)
        if not ok:
            self.console.print(f"[red]{host}[/]: {phase} failed: {detail}")

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]{text}[/]")

    def op_done(self, host: str, op: str, status: str) -> None:
        self.ops += 1
        if self.task is not None:
            self.progress.update(self.task, current=f"{host}: {op} ({status})")
        if self.verbose or status == "failed":
            colour = {"changed": "yellow", "would_change": "yellow", "failed": "red"}.get(status, "green")
            self.console.print(f"[{colour}]{status:>12}[/] {host}: {op}")
