"""Live progress on stderr while a run goes on: phase, hosts done, the operation just finished.

On a terminal that is a rich progress bar. Anywhere else (a log file, a pipe, cron, CI) rich draws
no bar at all, so a long apply would print nothing between its start and its result: there the
same events become plain lines, each with the time elapsed since the run began.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text, TextType

HEARTBEAT_S = 30.0  # the longest a log stays silent while operations still finish


class RichObserver:
    """Implements the engine's Observer protocol: a rich progress bar per phase on a terminal,
    plain lines elsewhere (`plain`), from one set of counters so both always tell the same story.

    Plain lines: the phase with its total, each host finished (with the count so far), failed
    operations and notes, and a heartbeat — how many operations finished, and the last one — at
    most every `heartbeat_s` of silence. The heartbeat is driven by op_done calls rather than a
    timer: the engine runs on gevent, and a thread here would be one more thing a shard's fork
    copies; operations finish often enough in a long phase to carry it.
    """

    def __init__(
        self,
        console: Console,
        verbose: bool = False,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.verbose = verbose
        # The test rich itself uses to decide whether to draw a live display (a terminal, not a
        # dumb one; TTY_INTERACTIVE=0/1 overrides it): plain lines exactly where no bar shows.
        self.plain = not console.is_interactive
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.started = self.last_line = clock()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=self.plain,  # no live display, no refresh thread, no blank line when it stops
        )
        self.task: TaskID | None = None
        self.ops = 0  # operations finished in the whole run
        self.phase_name = ""
        self.total = 0  # hosts in the current phase
        self.done = 0  # hosts finished in the current phase
        self.phase_ops = 0  # operations finished in the current phase
        self.last_op = ""  # "host: op (status)", the one just finished

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def phase(self, name: str, total: int) -> None:
        self.phase_name, self.total, self.done, self.phase_ops, self.last_op = name, total, 0, 0, ""
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(name, total=total, current="")
        if self.plain:
            self._say(f"{name}: {total} host{'s' if total != 1 else ''}")

    def host_done(self, host: str, phase: str, ok: bool, detail: str = "") -> None:
        if phase != "check":
            self.done += 1
            if self.task is not None:
                self.progress.advance(self.task)
        count = f"({self.done}/{self.total})"
        if self.plain:
            self._say(f"{phase}: {host} done {count}" if ok else f"{phase}: {host} failed {count}: {detail}")
        elif not ok:
            self._say((host, "red"), f": {phase} failed: {detail}")

    def note(self, text: str) -> None:
        self._say((text, "yellow"))

    def op_done(self, host: str, op: str, status: str) -> None:
        self.ops += 1
        self.phase_ops += 1
        self.last_op = f"{host}: {op} ({status})"
        if self.task is not None:
            self.progress.update(self.task, current=self.last_op)
        if self.verbose or status == "failed":
            colour = {"changed": "yellow", "would_change": "yellow", "failed": "red"}.get(status, "green")
            self._say((f"{status:>12}", colour), f" {host}: {op}")
        elif self.plain and self.clock() - self.last_line >= self.heartbeat_s:
            many = "operation" if self.phase_ops == 1 else "operations"
            self._say(f"{self.phase_name}: {self.phase_ops} {many} done; last {self.last_op}")

    def _say(self, *parts: TextType | tuple[str, str]) -> None:
        """One line on the console: styled on a terminal; elsewhere plain text after the time
        elapsed. A Text, never a markup string, so that a host's or an error's brackets stay as
        they are and a log gets no escape codes."""
        line = Text.assemble(*parts)
        if self.plain:
            now = self.clock()
            self.last_line = now
            line = Text(f"[{timedelta(seconds=int(now - self.started))}] {line.plain}")
        self.console.print(line, soft_wrap=True)
