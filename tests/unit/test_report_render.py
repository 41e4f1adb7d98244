"""The readiness report as a person sees it: Debian's chromium renders the page of a run with a
failing node, headless, to a PNG (not empty, not blank) and to its DOM (the verdict and the
node's name are in what the browser built), and the browser logs no console message. The
console check is itself checked: the same command catches a page whose script fails.

Skipped where chromium is not installed (tools/setup.sh installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmaprov.report.html import write_report
from tests.support.browser import CHROMIUM, MISSING, WINDOW, chromium, console, png_pixels
from tests.support.pages import Page
from tests.support.runs import verify_run

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=MISSING)


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
