"""The lab's cache entries (images, package pools, boxes) made by one rdmaprov at a time: a second
run that needs the same entry waits for the first, says so, and then finds it made."""

from __future__ import annotations

import subprocess
import sys

from rdmaprov.lab.paths import making

# Two processes, as two rdmaprov runs are (the lock is the kernel's, per open file): the first
# holds the entry until its standard input closes, then makes it; the second reports what it saw.
FIRST = """
import sys
from pathlib import Path
from rdmaprov.lab.paths import making
entry = Path(sys.argv[1])
with making(entry):
    print("holding", flush=True)
    sys.stdin.read()
    entry.mkdir()
"""
SECOND = """
import sys
from pathlib import Path
from rdmaprov.lab.paths import making
entry = Path(sys.argv[1])
with making(entry, log=lambda line: print(line, flush=True)):
    print(f"made: {entry.is_dir()}", flush=True)
"""


def _start(code: str, entry) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, str(entry)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_second_maker_waits_says_so_and_then_finds_the_entry_made(tmp_path):
    entry = tmp_path / "images" / "debian12-abc"
    first = _start(FIRST, entry)
    try:
        assert first.stdout.readline() == "holding\n"
        second = _start(SECOND, entry)
        assert second.stdout.readline() == f"lab: waiting for another rdmaprov making {entry}\n"
        assert not entry.exists()
        first.stdin.close()
        assert first.wait(30) == 0
        assert second.stdout.read() == "made: True\n"
        assert second.wait(30) == 0
    finally:
        first.kill()


def test_nobody_making_the_entry_means_no_wait_and_no_word(tmp_path):
    said: list[str] = []
    with making(tmp_path / "mirror" / "pool", log=said.append):
        pass
    with making(tmp_path / "mirror" / "pool", log=said.append):
        pass
    assert said == []
    assert (tmp_path / "mirror" / "pool.lock").exists()  # the lock file stays; the entry is never made by it


def test_an_entry_is_made_once_and_never_again_once_its_last_file_is_there(tmp_path):
    from rdmaprov.lab.paths import make_once

    entry = tmp_path / "boxes" / "debian12-abc"
    made: list[str] = []

    def make() -> None:
        entry.mkdir(parents=True)
        (entry / "rdmaprov-bookworm.box").write_text("box")
        made.append("made")

    for _ in range(2):
        make_once(entry, entry / "rdmaprov-bookworm.box", make)
    assert made == ["made"]


MPI_SECOND = """
from rdmaprov.lab import mpi
mpi._build = lambda *args: print("built", flush=True)
print(mpi.ensure_mpi_archive(log=lambda line: print(line, flush=True)), flush=True)
"""


def test_the_lab_mpi_archive_is_built_by_one_run_while_another_waits_and_uses_it(tmp_path, monkeypatch):
    """tools/test.sh builds it in the background (tests/support/prewarm.py) while the mixed-MPI lab
    test may ask `lab mpi` for it: the second waits for the first build, then builds nothing. Two
    processes, as the two runs are (a thread here would be a greenlet once another unit test has
    let gevent patch threading, and its flock would stop the whole process)."""
    from rdmaprov.lab import mpi

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = mpi.archive_path()
    first = _start(FIRST.replace("entry.mkdir()", "entry.write_text('archive')"), path)
    second = None
    try:
        assert first.stdout.readline() == "holding\n"
        second = _start(MPI_SECOND, path)
        assert second.stdout.readline() == f"lab: waiting for another rdmaprov making {path}\n"
        first.stdin.close()
        assert first.wait(30) == 0
        said = second.stdout.read().splitlines()
        assert second.wait(30) == 0
        assert said[0].startswith(f"mpi: {path} ") and said[1:] == [str(path)], said  # and no "built"
        assert path.read_text() == "archive"
    finally:
        first.kill()
        if second is not None:
            second.kill()
