"""The node report crosses SSH gzipped: run here by sh with the real gzip and base64, unpacked as
the fact unpacks it, it is the text the node printed; without those tools it is sent plain. The
whole report command runs packed in test_node_health (_report_of_this_machine)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rdmaprov.facts.node import NodeFacts
from rdmaprov.facts.packed import MARK, packed, unpacked
from rdmaprov.parsers.node import parse_node_report

# A GPU node's report, captured on a real H100 machine (tests/fixtures/gpu-h100/README.md).
REPORT = Path(__file__).parents[1] / "fixtures" / "gpu-h100" / "node_report_h100_vm_torch_no_rdma.txt"


def _lines(command: str, path: str | None = None) -> list[str]:
    env = {"PATH": path} if path else None
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True, env=env)
    return done.stdout.splitlines()


def test_a_packed_report_is_the_text_the_node_printed_in_a_fraction_of_the_bytes():
    text = REPORT.read_text()
    lines = _lines(packed(f"cat {REPORT}"))
    assert lines[0] == MARK and len("\n".join(lines)) * 3 < len(text) and len(lines) * 4 < len(text.splitlines())
    assert unpacked(lines) == text
    assert NodeFacts().process(lines) == parse_node_report(text)


def test_a_node_without_gzip_sends_the_report_plain(tmp_path):
    (tmp_path / "cat").symlink_to(shutil.which("cat"))
    lines = _lines(packed(f"cat {REPORT}"), str(tmp_path))
    assert lines == REPORT.read_text().splitlines() and unpacked(lines) == REPORT.read_text().rstrip("\n")


def test_a_stream_cut_short_gives_what_arrived_and_a_damaged_one_says_so():
    text = REPORT.read_text()
    whole = _lines(packed(f"cat {REPORT}"))
    cut = unpacked(whole[: len(whole) // 2])
    assert 0 < len(cut) < len(text) and text.startswith(cut)
    with pytest.raises(ValueError, match="packed output is damaged"):
        unpacked([MARK, "not base64 at all!"])
    with pytest.raises(ValueError, match="packed output is damaged"):
        unpacked([MARK, "aGVsbG8gd29ybGQ="])  # base64, but not gzip
