"""`mpirun --version`: which MPI a node launches jobs with.

Open MPI prints `mpirun (Open MPI) 4.1.4` (Debian 12) or `mpirun (Open MPI) 5.0.7` (Debian 13);
other MPIs are kept as their first line, compared as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MpiVersion:
    implementation: str  # "Open MPI", or another MPI's first line
    version: str  # "4.1.4"; "" when the output names no version

    @property
    def series(self) -> str:
        """What must match for ranks to run one job together: Open MPI's major version (4.x runs its
        daemons with ORTE, 5.x with PRRTE), else the whole line."""
        return f"{self.implementation} {self.version.split('.')[0]}" if self.version else self.implementation

    def __str__(self) -> str:
        return f"{self.implementation} {self.version}".strip()


_OPEN_MPI = re.compile(r"\(Open MPI\)\s+(\d+\.\d+(?:\.\d+)?\S*)")


def parse_mpirun_version(text: str) -> MpiVersion | None:
    """The MPI behind `mpirun --version`'s output; None when it printed nothing (no mpirun)."""
    match = _OPEN_MPI.search(text)
    if match:
        return MpiVersion("Open MPI", match.group(1))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return MpiVersion(lines[0], "") if lines else None


# Open MPI frames its own reports ("mpirun detected that one or more processes exited with
# non-zero status…") between lines of dashes, and tags its launcher's notes with [host:pid]
# ("[node1:03092] Warning: could not find environment variable…"); the program's own last words
# come before them. A box is Open MPI's when its text names the launcher or its parameters: a
# rule the program printed itself hides nothing.
_BOX_RULE = re.compile(r"^-{20,}\s*$")
_OPEN_MPI_BOX = re.compile(r"\b(?:mpirun|prterun|orted|ORTE|PRRTE|MPI_ABORT)\b|Open MPI|Primary job|MCA parameter")
_LAUNCHER_NOTE = re.compile(r"^\[[\w.-]+:\d+\] ")
_EXIT_CODE = re.compile(r"^\s*Exit code:\s+(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class JobLog:
    """A job's log split into what the program printed and what the launcher reported."""

    program: list[str]  # the program's non-empty lines, in order
    launcher: list[str]  # each of Open MPI's boxed reports as one sentence, in order


def split_job_log(text: str) -> JobLog:
    """The program's lines apart from Open MPI's boxes (each kept as one sentence: when the
    program never started, a box is the only account of why) and its [host:pid] notes."""
    lines = text.splitlines()
    program, launcher, at = [], [], 0
    while at < len(lines):
        line = lines[at]
        if _BOX_RULE.match(line):
            close = next((i for i in range(at + 1, len(lines)) if _BOX_RULE.match(lines[i])), None)
            if close is not None and _OPEN_MPI_BOX.search(boxed := "\n".join(lines[at + 1 : close])):
                launcher.append(" ".join(boxed.split()))
                at = close + 1
                continue
        elif line.strip() and not _LAUNCHER_NOTE.match(line):
            program.append(line)
        at += 1
    return JobLog(program, launcher)


def mpirun_exit_code(text: str) -> int | None:
    """The exit code mpirun reports for the first process that failed, None when it reports none."""
    match = _EXIT_CODE.search(text)
    return int(match[1]) if match else None
