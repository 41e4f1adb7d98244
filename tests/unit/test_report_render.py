"""The readiness report as a person sees it: Debian's chromium renders the page of a run with a
failing node, headless, to a PNG (not empty, not blank) and to its DOM (the verdict and the
node's name are in what the browser built), and the browser logs no console message. The
console check is itself checked: the same command catches a page whose script fails.

Skipped where chromium is not installed (tools/setup.sh installs it)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from rdmaprov.report.html import write_report
from tests.support.pages import Page
from tests.support.runs import verify_run

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed: tools/setup.sh installs it (apt-get install chromium)"
)
WINDOW = (1400, 2000)


def chromium(page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    """Chromium headless on `page`, with the page's console written to stderr (one
    `INFO:CONSOLE:<line>] "<message>", source: …` line per message, errors included)."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",  # containers' /dev/shm is small
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *action,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def console(stderr: str) -> list[str]:
    """The console's messages (and uncaught errors) among chromium's own log lines."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the image data inflated) of a PNG: its IHDR and IDAT chunks, no library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, size, idat = 8, (0, 0), b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    return size[0], size[1], zlib.decompress(idat)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "verify.html"
    write_report(str(path), verify_run(8, "node07", cluster="render").to_json())
    return path


def test_the_page_renders_to_a_picture_that_is_not_blank_and_logs_nothing(page, tmp_path):
    shot = tmp_path / "page.png"
    run = chromium(page, tmp_path / "profile", f"--screenshot={shot}")
    assert console(run.stderr) == []
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    # A blank page inflates to a few byte values (white, and the rows' filter types); text,
    # tables and plots to nearly all of them.
    assert sum(bytes([value]) in pixels for value in range(256)) > 64


def test_the_rendered_dom_holds_the_verdict_and_the_failing_node(page, tmp_path):
    run = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console(run.stderr) == []
    dom = Page(run.stdout)
    assert dom.verdict.startswith("NOT READY") and "exit 4" in dom.verdict and "node07 (4)" in dom.verdict
    assert dom.matrices("node")[0].row("node07")[4][0] == "fail"


def test_the_console_check_catches_a_failing_script(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><p>x</p><script>missing_function()</script></body></html>")
    [line] = console(chromium(broken, tmp_path / "profile", "--dump-dom").stderr)
    assert "Uncaught ReferenceError: missing_function is not defined" in line
