"""User-facing errors: each names where the problem is and how to fix it, never a traceback."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import NoReturn

# Exit codes (README, "Commands"): 0/2/4/6 are a run's outcome; 1 means the input (inventory,
# options' values) is wrong and nothing was done; 64 (sysexits' EX_USAGE) means the command line
# itself is wrong. Neither may look like "changes made" (2) to a cron job or a systemd unit.
EXIT_INVALID = 1
EXIT_USAGE = 64


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, located as precisely as we can."""

    file: str
    message: str
    line: int | None = None
    column: int | None = None
    path: str = ""
    fix: str = ""

    def format(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: "
        if self.path:
            text += f"{self.path}: "
        text += self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class UserError(Exception):
    """An error caused by the user's input or environment; the CLI prints it and exits non-zero."""

    def __init__(self, problems: list[Problem] | Problem | str, exit_code: int = 1) -> None:
        if isinstance(problems, str):
            problems = [Problem(file="rdmaprov", message=problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = problems
        self.exit_code = exit_code
        super().__init__("\n".join(p.format() for p in problems))


class UsageParser(argparse.ArgumentParser):
    """argparse with a usage-error exit code that never collides with a run's outcome."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (exit {EXIT_USAGE}: usage error)\n")
