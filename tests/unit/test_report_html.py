"""The readiness report (report/html.py, report/svg.py): pages of whole runs built by the gates'
own functions from real captured outputs (tests/support/runs.py), read back as a browser's parser
reads them: the verdict names the failing node, the rail matrix colours its rail, the plots'
threshold lines sit at their values on their axes, hostile names stay text, a saved run's page
is the live run's page byte for byte, and a bad RUN.json is one line naming the file and the fix."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from rdmaprov import cli
from rdmaprov.engine.results import HostResult, OpResult, RunResult
from rdmaprov.health.checks import verify_node
from rdmaprov.health.diagnose import STEPS, localize, pair_verdicts
from rdmaprov.health.findings import CHECKS
from rdmaprov.health.gates.pairs import ring_pairs
from rdmaprov.health.verify import HostVerification
from rdmaprov.inventory import load_inventory
from rdmaprov.parsers.node import parse_node_report
from rdmaprov.report.html import HEALTH_CHECKS, render, write_report
from rdmaprov.report.svg import Axis, Bar, Rule, Series, bar_chart, line_chart, nice_ticks
from tests.conftest import FIXTURES
from tests.support.inventories import lab_host
from tests.support.pages import Page
from tests.support.runs import NODE_REPORT, latency_results, rail_results, verifications, verify_run

SVG = "{http://www.w3.org/2000/svg}"


def _svgs(page: str) -> list[ET.Element]:
    """Every inline SVG of the page, parsed as XML (which they must be)."""
    return [ET.fromstring(match) for match in re.findall(r"<svg .*?</svg>", page, re.S)]


def _ticks(svg: ET.Element, axis: str) -> dict[str, float]:
    """Tick label → its coordinate (y for the y axis, x for the x axis)."""
    ticks = {}
    for group in svg.iter(f"{SVG}g"):
        if group.get("class") == f"{axis}-tick":
            line, text = group.find(f"{SVG}line"), group.find(f"{SVG}text")
            assert line is not None and text is not None and text.text
            ticks[text.text] = float(line.get("y1" if axis == "y" else "x1") or "nan")
    return ticks


def _threshold(svg: ET.Element) -> ET.Element:
    [line] = [e for e in svg.iter(f"{SVG}line") if e.get("class") == "threshold"]
    return line


# The page of a run


def test_a_passing_runs_verdict_is_ready_with_its_exit_code_and_every_rail_green():
    page = Page(render(verify_run(4, cluster="green").to_json()))
    assert page.verdict.startswith("READY") and "exit 0: all checks and gates pass" in page.verdict
    assert "failing nodes" not in page.verdict and "what fails" not in page.verdict
    [rails] = page.matrices("node")
    assert [row[0][1] for row in rails.rows[1:]] == ["node01", "node02", "node03", "node04"]
    assert [cell[1] for cell in rails.rows[0]] == ["node", *(f"rail {i}" for i in range(8))]
    assert {cell[0] for row in rails.rows[1:] for cell in row[1:]} == {"pass"}
    assert all(cell[1] == "23.1" for row in rails.rows[1:] for cell in row[1:])  # 23.14 Gb/s, the capture's


def test_a_failing_node_is_named_in_the_verdict_and_red_at_its_rail_in_the_matrix():
    page = Page(render(verify_run(8, "node07", cluster="one-bad").to_json()))
    assert page.verdict.startswith("NOT READY") and "exit 4: a check or gate failed" in page.verdict
    # named most often: its MTU, its kernel, both its pairs' rail 3, the suspect of the diagnosis
    assert "failing nodes (how many failures name each): node07 (4), node06 (1), node08 (1)" in page.verdict
    assert "node07: 2 checks fail: MTU eth0: expected 9000, found 1500" in page.verdict
    assert "suspect node07: node07 -> node08: node07:irdma3 -> node08:irdma3: 0.04801 Gb/s" in page.verdict
    rails = page.matrices("node")[0]  # the gates' (the diagnosis' own follows)
    bad = rails.row("node07")
    assert [cell[0] for cell in bad[1:]] == ["pass"] * 3 + ["fail"] + ["pass"] * 4 and bad[4][1] == "0.048"
    assert "node06:irdma3 -> node07:irdma3: 0.04801 Gb/s (0.2% of the port rate) < 22.5 Gb/s" in bad[4][2]
    assert {cell[0] for cell in rails.row("node02")[1:]} == {"pass"}  # far from node07 on the ring
    # the verify table: node07 failed, one check and one fleet outlier, two failing rail tests
    nodes = next(t for t in page.tables if t.rows[0][0][1] == "node" and t.css == "")
    assert [cell[1] for cell in nodes.row("node07")] == [
        "node07",
        "10.77.0.17",
        "failed",
        "1 fail, 1 unknown of 17",
        "0",
        "1",
        "2",
    ]


def test_the_diagnosis_shows_each_rounds_pairs_and_the_suspect_with_its_evidence():
    doc = verify_run(8, "node07", cluster="diag").to_json()
    assert [t["details"]["step"] for t in doc["diagnosis"]["tests"]] == ["round 1"] * 4 + ["round 2"] * 2
    text = render(doc["diagnosis"])  # `diagnose --json`, alone
    page = Page(text)
    assert page.verdict.startswith("NOT READY") and "exit 4: suspects, or nodes no test could clear" in page.verdict
    assert f"<h3>round 1: {STEPS['round 1']} (4 tests)</h3>" in text
    assert f"<h3>round 2: {STEPS['round 2']} (2 tests)</h3>" in text
    suspects = next(t for t in page.tables if t.rows[0][0][1] == "node" and t.rows[0][1][1] == "verdict")
    [(name, verdict, evidence)] = suspects.rows[1:]
    assert (name[1], verdict[1]) == ("node07", "SUSPECT") and "node01 -> node07: node01:irdma3" in evidence[1]
    assert "cleared (7): node01, node02, node03, node04, node05, node06, node08" in text
    assert page.matrices("node")[0].row("node07")[4][0] == "fail"  # the diagnosis' rails, from its pair verdicts


def test_verdicts_of_runs_that_changed_nodes_or_only_converged_them():
    def host(status: str) -> HostResult:
        op = OpResult("nccl_env | Write /etc/nccl.conf", status, deploy="nccl_env")
        return HostResult("gpu1", "10.0.0.1", "changed", ops=[op])

    started = "2026-11-26T08:00:00+00:00"
    converged = RunResult("apply", "inv.yaml", "c", started, 3.0, [host("changed")])
    verdict = Page(render(converged.to_json())).verdict
    assert verdict.startswith("NOT JUDGED") and "exit 2: changes made" in verdict and "--skip-verify" in verdict
    drift = RunResult("check", "inv.yaml", "c", started, 3.0, [host("would_change")], verifications(["gpu1"], None))
    verdict = Page(render(drift.to_json())).verdict
    assert verdict.startswith("READY") and "exit 2: drift" in verdict and "no gate ran" in verdict
    stopped = RunResult("apply", "inv.yaml", "c", started, 3.0, [host("changed")], interrupted=True)
    assert "exit 130: interrupted (Ctrl-C)" in Page(render(stopped.to_json())).verdict


def _node_section(page: str, name: str) -> str:
    """A failing node's findings in the open: from its heading to the fold of all of them."""
    start = page.index(f"<h3>{name} ")
    return page[start : page.index("<details>", start)]


def test_findings_are_sorted_into_checks_health_findings_and_fleet_outliers():
    assert len(HEALTH_CHECKS) == 10 and HEALTH_CHECKS <= set(CHECKS)
    # node03's two K80s fell off the bus (a real journal): it reports no GPU, and the Xids say why
    xid = (FIXTURES / "public" / "journal_xid_79_fallen_off_bus_2xK80_same_board_kernel_ts.txt").read_text()
    report = parse_node_report(NODE_REPORT.replace("@@ xid\n", "@@ xid\n" + xid))
    fallen = HostVerification("node03", "10.77.0.13", "failed", None, verify_node(lab_host(gpu={"count": 1}), report))
    hosts = verifications(["node01", "node02", "node04"], "node02") + [fallen]
    page = render(RunResult("verify", "inv.yaml", "c", "2026-11-26T08:00:00+00:00", 1.0, [], hosts).to_json())
    fell = _node_section(page, "node03")
    checks, health = fell.index("<p>checks</p>"), fell.index("<p>health findings</p>")
    count = fell.index("<td>count</td><td>gpus</td><td>1</td><td>0</td>")
    assert checks < count < health < fell.index("Xid 79 on 0000:05:00, Xid 79 on 0000:06:00")
    odd = _node_section(page, "node02")
    assert odd.index("<p>checks</p>") < odd.index("MTU") < odd.index("<p>fleet outliers</p>") < odd.index("kernel")
    nodes = next(t for t in Page(page).tables if t.rows[0][0][1] == "node")
    assert [cell[1] for cell in nodes.row("node03")][3:6] == ["1 fail, 1 unknown of 16", "1", "0"]


# Plots


def _all_reduce_plot(page: str) -> ET.Element:
    [plot] = [svg for svg in _svgs(page) if "all_reduce busbw" in (svg.get("aria-label") or "")]
    return plot


def _points(plot: ET.Element) -> list[tuple[float, float]]:
    [series] = plot.iter(f"{SVG}polyline")
    return [(float(a), float(b)) for a, b in (p.split(",") for p in (series.get("points") or "").split())]


def test_the_all_reduce_plot_has_both_axes_and_its_threshold_at_200_gbs():
    """The 8 × A100 sweep, 4 B to 8G (its two 0-byte rows have no place on a log axis)."""
    plot = _all_reduce_plot(render(verify_run(2, cluster="plot").to_json()))
    x, y = _ticks(plot, "x"), _ticks(plot, "y")
    assert list(x) == ["4", "64", "1K", "16K", "256K", "4M", "64M", "1G"]  # every fourth of 32 powers of two
    assert list(y) == ["0", "50", "100", "150", "200", "250"]
    line = _threshold(plot)
    assert line.get("y1") == line.get("y2")
    assert float(line.get("y1") or "nan") == pytest.approx(y["0"] + (y["250"] - y["0"]) * 200 / 250, abs=0.1)
    labels = [t.text for t in plot.iter(f"{SVG}text")]
    assert "threshold 200 GB/s" in labels and "busbw (GB/s)" in labels
    assert "message size (bytes; K, M, G: binary multiples)" in labels
    points = _points(plot)
    assert len(points) == 32 and points[0][0] == x["4"] and points[20][0] == x["4M"]
    assert points[-1][1] == pytest.approx(y["0"] + (y["250"] - y["0"]) * 235.26 / 250, abs=0.1)  # 8G: 235.26 GB/s


def test_a_failed_all_reduce_keeps_its_rows_and_they_are_drawn():
    """A sweep that died after its 16G row: no figure was judged, so no threshold; the rows stay."""
    page = render(verify_run(2, "node02", cluster="died").to_json())
    plot = _all_reduce_plot(page)
    x, y = _ticks(plot, "x"), _ticks(plot, "y")
    assert list(x) == ["1G", "2G", "4G", "8G", "16G"] and list(y) == ["0", "100", "200", "300", "400"]
    points = _points(plot)
    assert [a for a, _ in points] == [x["1G"], x["2G"], x["4G"], x["8G"], x["16G"]]
    assert points[0][1] == pytest.approx(y["0"] + (y["100"] - y["0"]) * 110.84 / 100, abs=0.1)
    assert not [e for e in plot.iter(f"{SVG}line") if e.get("class") == "threshold"]
    assert "the run failed: HCA-128: Test NCCL failure" in page


def test_a_bar_chart_draws_its_threshold_across_at_its_value():
    bars = [Bar("a -> b", 23.14, "pass"), Bar("b -> c", 0.048, "fail")]
    svg = ET.fromstring(bar_chart("pairs", bars, Axis.linear("bandwidth (Gb/s)", 24.3), [Rule(22.5, "threshold")]))
    x = _ticks(svg, "x")
    assert list(x) == ["0", "5", "10", "15", "20", "25"]
    line = _threshold(svg)
    assert line.get("x1") == line.get("x2")
    assert float(line.get("x1") or "nan") == pytest.approx(x["0"] + (x["25"] - x["0"]) * 22.5 / 25, abs=0.1)
    widths = [float(r.get("width") or "nan") for r in svg.iter(f"{SVG}rect")]
    assert widths[0] == pytest.approx((x["25"] - x["0"]) * 23.14 / 25, abs=0.1)


def test_axes_ticks_and_the_same_bytes_for_the_same_figures():
    assert nice_ticks(24.3) == [0, 5, 10, 15, 20, 25] and nice_ticks(0.61) == [0, 0.2, 0.4, 0.6, 0.8]
    assert nice_ticks(1260) == [0, 500, 1000, 1500] and nice_ticks(0) == [0.0, 1.0]
    sizes = Axis.powers_of_two("size", 1, 8 << 30)
    assert sizes.ticks[0] == 1 and sizes.high == 8 << 30 and len(sizes.ticks) <= 9
    alone = Axis.powers_of_two("size", 1 << 20, 1 << 20)
    assert (alone.low, alone.high) == (1 << 20, 2 << 20)
    chart = line_chart("t", [Series("s", [(1, 1.0), (2, 2.0)])], Axis.powers_of_two("x", 1, 2), Axis.linear("y", 2))
    assert chart == line_chart(
        "t", [Series("s", [(1, 1.0), (2, 2.0)])], Axis.powers_of_two("x", 1, 2), Axis.linear("y", 2)
    )


# Escaping, and nothing fetched


HOSTILE = '<script>alert(1)</script>" onmouseover="x'


def test_every_value_from_the_json_is_escaped():
    names = [HOSTILE, "node02"]
    run = RunResult("verify", "inv.yaml", HOSTILE, "2026-11-26T08:00:00+00:00", 1.0, [], verifications(names, HOSTILE))
    pairs = ring_pairs(names)
    run.gates = rail_results(pairs, HOSTILE) + latency_results(pairs, HOSTILE)
    run.diagnosis = localize(names, lambda p: pair_verdicts(p, rail_results(p, HOSTILE)))
    text = render(run.to_json())
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot; onmouseover=&quot;x" in text
    page = Page(text)
    assert not [tag for tag, attributes in page.tags if tag == "script" or "onmouseover" in attributes]
    assert HOSTILE in page.verdict and any(HOSTILE in cell[1] for t in page.tables for r in t.rows for cell in r)
    for svg in _svgs(text):  # the plots' labels and tooltips: still XML, the name its text
        assert not [e for e in svg.iter() if e.tag.endswith("script") or "onmouseover" in e.attrib]


def test_the_page_fetches_nothing_and_needs_no_script():
    text = render(verify_run(4, "node03", cluster="offline").to_json())
    assert not re.search(r"<script|<link|<img|<iframe|\bsrc=|\bhref=|url\(|@import", text, re.I)
    assert "Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\"" in text
    # the one address in the page is SVG's namespace, which names and never fetches
    assert set(re.findall(r"https?://[^\"' ]+", text)) == {"http://www.w3.org/2000/svg"}


# Size at scale


def test_a_64_node_8_rail_page_is_under_5_mb_and_its_matrix_is_one_table():
    text = render(verify_run(64, "node37", cluster="big").to_json())
    assert len(text.encode()) < 5_000_000
    page = Page(text)
    gate_rails, diagnosis_rails = page.matrices("node")
    assert len(gate_rails.rows) == 65 and all(len(row) == 9 for row in gate_rails.rows)
    assert [row[0][1] for row in gate_rails.rows if any(cell[0] == "fail" for cell in row)] == [
        "node36",
        "node37",
        "node38",
    ]
    [latency] = page.matrices("pair")
    assert len(latency.rows) == 65 and latency.row("node37 -> node38")[1][0] == "warn"  # above its baseline


# The live flag and the report command: one code path, the same bytes


def test_report_on_a_saved_run_writes_the_same_bytes_as_report_on_the_live_run(tmp_path, capsys):
    result = verify_run(8, "node07", cluster="same-bytes")
    live, later, saved = tmp_path / "live.html", tmp_path / "later.html", tmp_path / "run.json"
    args = cli.build_parser().parse_args(["verify", "inv.yaml", "--gates", "--json", "--report", str(live)])
    assert cli._finish(result, args, Console(file=io.StringIO())) == 4
    saved.write_text(capsys.readouterr().out)  # what `rdmaprov verify … --json > run.json` keeps
    assert cli.main(["report", str(saved), "-o", str(later)]) == 0
    assert capsys.readouterr().out == f"{later}: the readiness report of {saved}\n"
    assert live.read_bytes() == later.read_bytes() and b"node07" in live.read_bytes()
    diagnosis = tmp_path / "diagnosis.json"  # `diagnose --json > diagnosis.json`, and its --report
    diagnosis.write_text(json.dumps(result.diagnosis.to_json(), indent=2))
    write_report(str(live), result.diagnosis.to_json())
    assert cli.main(["report", str(diagnosis), "-o", str(later)]) == 0
    assert live.read_bytes() == later.read_bytes()


@pytest.fixture
def unreachable(tmp_path):
    """One host on a loopback port nothing listens on: connecting fails at once, for real."""
    path = tmp_path / "inv.yaml"
    path.write_text(
        "cluster:\n  name: c\n  ssh: {port: 1, connect_timeout: 5}\nhosts:\n  gpu-a: {address: 127.0.0.1}\n"
    )
    return load_inventory(path)


@pytest.mark.parametrize(("command", "word"), [("verify", "NOT READY"), ("diagnose", "NOT READY")])
def test_the_report_flag_on_a_real_command_writes_the_page(command, word, unreachable, tmp_path, capsys):
    page = tmp_path / "page.html"
    assert cli.main([command, str(unreachable.path), "--report", str(page), "--json"]) == 4
    assert json.loads(capsys.readouterr().out)  # stdout stays the JSON
    read = Page(page.read_text())
    assert read.verdict.startswith(word) and "gpu-a" in read.verdict and "Could not connect" in read.verdict


def test_a_junit_file_that_cannot_be_written_is_one_line_after_the_run(unreachable, tmp_path, capsys):
    target = tmp_path / "no-such-dir" / "verify.xml"
    assert cli.main(["verify", str(unreachable.path), "--junit", str(target), "--json"]) == 1
    fix = "(fix: name a file in a directory that exists and that you can write)"
    err = capsys.readouterr().err
    assert err.endswith(f"error: {target}: cannot write the JUnit XML: No such file or directory {fix}\n"), err
    assert "Traceback" not in err


# A bad RUN.json: one line naming the file and the fix


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file (fix: save a run with `rdmaprov verify INVENTORY --gates --json > RUN.json`"),
        ("", "the file is empty"),
        ("verify\n┏━━━┓\n", ":1:1: not JSON: Expecting value (fix: a run's tables are not its JSON: save a run with"),
        ("[1, 2]", "not a run's JSON: a JSON list where a run's object was expected (fix: save a run with"),
        ('{"schema_version": 2}', "schema_version 2: written by another rdmaprov version (this one reads 1)"),
        (
            '{"schema_version": 1}',
            "not a run's JSON (schemas/result.schema.json): at the top level: 'rdmaprov_version'",
        ),
        ('{"suspects": {}, "cleared": []}', "at the top level: 'undecided' is a required property"),
        (b"\xff\xfe{", "not text (UTF-8): not a run's JSON"),
    ],
)
def test_a_bad_run_json_is_one_line_naming_the_file_and_the_fix(content, message, tmp_path, capsys):
    run, out = tmp_path / "run.json", tmp_path / "page.html"
    if isinstance(content, bytes):
        run.write_bytes(content)
    elif content is not None:
        run.write_text(content)
    assert cli.main(["report", str(run), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}") and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_a_run_json_with_a_wrong_value_deep_inside_names_where(tmp_path, capsys):
    doc = verify_run(2, cluster="deep").to_json()
    doc["gates"][3]["measured"] = "fast"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(doc))
    assert cli.main(["report", str(run), "-o", str(tmp_path / "page.html")]) == 1
    assert "at gates/3/measured: 'fast' is not of type 'number', 'null'" in capsys.readouterr().err


def test_a_page_that_cannot_be_written_is_one_line_too(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps(verify_run(2, cluster="unwritable").to_json()))
    target = tmp_path / "no-such-dir" / "page.html"
    assert cli.main(["report", str(run), "-o", str(target)]) == 1
    fix = "(fix: name a file in a directory that exists and that you can write)"
    assert capsys.readouterr().err == f"error: {target}: cannot write the report: No such file or directory {fix}\n"


def test_a_baseline_the_schema_allows_without_its_change_still_renders():
    doc = verify_run(2, cluster="lean").to_json()
    doc["gates"][0]["baseline"] = {"value": 23.1, "drift": True}  # `change` is not required
    assert "23.1" in render(doc)
