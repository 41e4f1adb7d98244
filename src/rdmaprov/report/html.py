"""The readiness report: one self-contained HTML page per run, the plots cluster engineers draw by
hand (busbw against message size, the node × rail matrix, p99 per pair) beside the verdict.

The page is made from a run's JSON (`RunResult.to_json()`, or `Diagnosis.to_json()` for
`diagnose`), never from live objects: `--report` on a run and `rdmaprov report RUN.json` later
are one code path and write the same bytes. Nothing in the page is fetched (no script, font,
stylesheet or image outside it; sites are air-gapped) and nothing needs JavaScript: collapsed
parts are <details>, tooltips are title attributes. Every value from the JSON is HTML-escaped:
node names, reasons and findings come from inventories and remote hosts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from rdmaprov.engine.results import SCHEMA_VERSION
from rdmaprov.errors import Problem, UserError
from rdmaprov.health.diagnose import STEPS as DIAGNOSIS_STEPS
from rdmaprov.health.diagnose import Diagnosis
from rdmaprov.health.findings import CHECKS
from rdmaprov.health.gates.result import JOB_GATES
from rdmaprov.health.gates.subject import Subject
from rdmaprov.report.output import write_output
from rdmaprov.report.svg import Axis, Bar, Rule, Series, bar_chart, line_chart
from rdmaprov.schemas import load_schema

Doc = dict[str, Any]

SAVE_HINT = (
    "save a run with `rdmaprov verify INVENTORY --gates --json > RUN.json` (or apply, check, bootstrap, diagnose)"
)

# What each exit code of a command means (docs/commands.md); 130 is every command's Ctrl-C.
EXIT_MEANINGS: dict[str, dict[int, str]] = {
    "apply": {
        0: "nothing changed",
        2: "changes made",
        4: "failures (a host, a check or a gate)",
        6: "changes and failures",
    },
    "check": {0: "no drift", 2: "drift", 4: "failures (a fact, a host or a gate)", 6: "drift and failures"},
    "verify": {0: "all checks and gates pass", 4: "a check or gate failed, or a host is unreachable"},
    "diagnose": {0: "every node cleared", 4: "suspects, or nodes no test could clear"},
}
EXIT_MEANINGS["bootstrap"] = EXIT_MEANINGS["apply"]
INTERRUPTED = "interrupted (Ctrl-C): no verify or gates ran after it"

# Findings about a node's wear and errors, which no deploy sets; the other ids are the node's
# settings, and fleet.* the versions where a node differs from the rest.
HEALTH_CHECKS = frozenset(check.id for check in CHECKS.values() if check.health)
VERDICT_CLASS = {"pass": "pass", "warn": "warn", "fail": "fail", "skipped": "skip"}
MOST_LISTED = 25  # failures listed in the verdict; the rest are in the sections below

CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:16px 24px;color:#1b1b1b}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 6px;border-bottom:1px solid #ccc}
h3{font-size:14px;margin:14px 0 4px}p{margin:4px 0}.muted{color:#666}
table{border-collapse:collapse;margin:4px 0 8px}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;
vertical-align:top}th{background:#f2f2f2}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#fbe3e1}tr.warn td{background:#fff4d1}
.verdict{border:2px solid;padding:8px 12px;margin:8px 0;max-width:1100px}
.verdict .word{font-size:26px;font-weight:700;margin:0}
.ready{border-color:#2e7d32;background:#eaf5ea}.not-ready{border-color:#b3261e;background:#fbe9e7}
.unjudged{border-color:#8a6d00;background:#fff8e1}
.badge{display:inline-block;padding:0 5px;border-radius:3px;font-weight:600;font-size:11px}
.badge.pass{background:#cfe8cf}.badge.warn{background:#ffe08a}.badge.fail{background:#f4b6b0}
.badge.skip{background:#e3e3e3}
table.matrix{font-size:11px}table.matrix td,table.matrix th{padding:0 3px;line-height:12px;white-space:nowrap}
table.matrix td.pass{background:#cfe8cf}table.matrix td.warn{background:#ffe08a}
table.matrix td.fail{background:#f08a80;font-weight:700}table.matrix td.skip{background:#e3e3e3}
svg.plot{display:block;margin:6px 0;font:11px system-ui,"DejaVu Sans",sans-serif}
svg.plot rect.pass{fill:#66a866}svg.plot rect.warn{fill:#e0b000}svg.plot rect.fail{fill:#d9534f}
svg.plot rect.skip{fill:#aaa}svg.plot .threshold-label{fill:#b3261e;font-weight:600}
svg.plot .axis-label{font-weight:600}details{margin:4px 0}summary{cursor:pointer}
"""


class Html(str):
    """Markup this module wrote itself: the one kind of text a table cell does not escape."""


def _e(value: object) -> str:
    return value if isinstance(value, Html) else escape(str(value))


def _number(value: object) -> float | None:
    """A figure from the JSON (a bool or a word is no figure)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _figure(value: object, unit: str = "") -> str:
    number = _number(value)
    return "—" if number is None else f"{number:.4g}{' ' + unit if unit else ''}"


def _status(result: Doc) -> str:
    """A gate result's pass, warn, fail or skipped (JSON from before `status` existed: its `passed`)."""
    status = result.get("status")
    return status if status in VERDICT_CLASS else "pass" if result.get("passed") else "fail"


def _badge(status: str) -> Html:
    css = VERDICT_CLASS.get(status, "fail")
    return Html(f'<span class="badge {css}">{_e(status.upper())}</span>')


def _details(result: Doc) -> Doc:
    details = result.get("details")
    return details if isinstance(details, dict) else {}


def _table(headers: Sequence[str], rows: Iterable[tuple[str, Sequence[object]]], css: str = "") -> str:
    """A table of (row class, cells); every cell escaped unless this module wrote it (Html)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        f'<tr class="{_e(row_css)}">' + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>"
        for row_css, cells in rows
    )
    attribute = f' class="{_e(css)}"' if css else ""
    return f"<table{attribute}><tr>{head}</tr>{body}</table>"


def _list(items: Iterable[object]) -> Html:
    return Html("<ul>" + "".join(f"<li>{_e(item)}</li>" for item in items) + "</ul>")


def _fold(summary: str, body: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{_e(summary)}</summary>{body}</details>"


def _short(subject: str) -> str:
    """A subject as a heading shows it: an all_reduce over many nodes by their count."""
    hosts = Subject.parse(subject).hosts
    return subject if len(hosts) <= 4 else f"{len(hosts)} nodes ({hosts[0]}, {hosts[1]} … {hosts[-1]})"


# Reading a saved run


def _doc_schema(doc: Doc) -> Doc:
    """The schema a document is held to: the run's, or for a diagnosis its part of it. The
    diagnosis' own schema is reached through the run's (its tests refer to the gates' items):
    every key of the run's schema is kept, none of which a diagnosis has, and `$ref` picks the part."""
    root = load_schema("result")
    if _is_diagnosis(doc):
        return {
            "$schema": root["$schema"],
            "$id": root["$id"],
            "properties": root["properties"],
            "$ref": "#/properties/diagnosis",
        }
    return root


def _is_diagnosis(doc: Doc) -> bool:
    return "suspects" in doc and "command" not in doc


def _shape_problem(doc: object) -> str | None:
    """Why `doc` is not a run's (or a diagnosis') JSON as this rdmaprov writes it, None when it is."""
    if not isinstance(doc, dict):
        return f"not a run's JSON: a JSON {type(doc).__name__} where a run's object was expected"
    version = doc.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        return f"schema_version {version!r}: written by another rdmaprov version (this one reads {SCHEMA_VERSION})"
    error = best_match(jsonschema.Draft202012Validator(_doc_schema(doc)).iter_errors(doc))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    message = " ".join(error.message.split())  # one line, and a value it quotes cut short
    message = message if len(message) <= 160 else message[:159] + "…"
    return f"not a run's JSON (schemas/result.schema.json): at {where}: {message}"


def read_run(path: str) -> Doc:
    """A run's JSON from `path`; each way it can be wrong is one problem naming the file and the fix."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(Problem(path, "no such file", fix=SAVE_HINT)) from None
    except UnicodeDecodeError:
        raise UserError(Problem(path, "not text (UTF-8): not a run's JSON", fix=SAVE_HINT)) from None
    except OSError as exc:
        raise UserError(Problem(path, f"cannot be read: {exc.strerror or exc}", fix="name a readable file")) from None
    if not text.strip():
        raise UserError(Problem(path, "the file is empty (did the run fail before printing?)", fix=SAVE_HINT))
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        fix = f"a run's tables are not its JSON: {SAVE_HINT}"
        raise UserError(Problem(path, f"not JSON: {exc.msg}", exc.lineno, exc.colno, fix=fix)) from None
    problem = _shape_problem(doc)
    if problem:
        raise UserError(Problem(path, problem, fix=SAVE_HINT))
    return doc


def write_report(path: str, doc: Doc) -> None:
    """The page for `doc`, written to `path`. Made from the JSON text of the run read back (as
    `rdmaprov report` reads a saved one), so that both give the same bytes."""
    write_output(path, render(json.loads(json.dumps(doc))), "report")


# The run as the page reads it


@dataclass(frozen=True)
class Run:
    """A run's JSON, or a diagnosis' alone (`diagnose --json`), as one shape."""

    command: str
    exit_code: int
    doc: Doc
    hosts: list[Doc]
    verify: list[Doc] | None
    gates: list[Doc]
    diagnosis: Doc | None

    @classmethod
    def of(cls, doc: Doc) -> Run:
        if _is_diagnosis(doc):
            judged = Diagnosis(suspects=doc["suspects"], undecided=doc["undecided"], lost=doc.get("lost") or {})
            return cls("diagnose", judged.exit_code, doc, [], None, [], doc)
        verify = doc.get("verify")
        return cls(
            doc["command"], doc["exit_code"], doc, doc["hosts"], verify, doc.get("gates") or [], doc.get("diagnosis")
        )

    @property
    def judged(self) -> bool:
        """Whether anything judged the nodes (a run with --skip-verify only converged them)."""
        return self.verify is not None or bool(self.gates) or self.diagnosis is not None

    def nodes(self) -> list[str]:
        """Every node the run names, in the order it names them."""
        names = [v["name"] for v in self.verify or []] + [h["name"] for h in self.hosts]
        for result in self.gates + list((self.diagnosis or {}).get("tests", [])):
            if result["gate"] not in JOB_GATES:
                names += Subject.parse(result["subject"]).hosts
        names += list((self.diagnosis or {}).get("suspects", {}))
        return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Failure:
    """One thing that fails, the nodes it names (none for a gate across the whole cluster)."""

    nodes: tuple[str, ...]
    text: str


def _finding_text(finding: Doc) -> str:
    return f"{finding['check']} {finding['subject']}: expected {finding['expected']}, found {finding['found']}"


def _node_failures(run: Run) -> list[Failure]:
    """Hosts apply failed on, hosts verify could not read, and each host's failing checks."""
    failures = [
        Failure((h["name"],), f"{h['name']}: {h['status']}" + (f": {h['error']}" if h.get("error") else ""))
        for h in run.hosts
        if h["status"] in ("failed", "unreachable", "skipped", "interrupted")
    ]
    for host in run.verify or []:
        if host.get("error"):
            failures.append(Failure((host["name"],), f"{host['name']}: {host['status']}: {host['error']}"))
        failed = [f for f in host["findings"] if not f["ok"] and not f.get("unknown")]
        if failed:
            shown = "; ".join(_finding_text(f) for f in failed[:3]) + ("; …" if len(failed) > 3 else "")
            count = f"{len(failed)} check{'s' if len(failed) > 1 else ''} fail"
            failures.append(Failure((host["name"],), f"{host['name']}: {count}: {shown}"))
    return failures


def _gate_hosts(result: Doc) -> tuple[str, ...]:
    """The nodes a gate result counts against: none for a job across the cluster, the nodes an
    incast's failure names (details.named), else its subject's."""
    if result["gate"] in JOB_GATES:
        return ()
    return tuple(result["details"].get("named") or Subject.parse(result["subject"]).hosts)


def _failures(run: Run) -> list[Failure]:
    """Everything that fails in the run, nodes first, then gates, then the diagnosis' verdicts."""
    found = _node_failures(run)
    for result in run.gates:
        if _status(result) == "fail":
            hosts = _gate_hosts(result)
            found.append(Failure(hosts, f"{result['gate']} {_short(result['subject'])}: {result['reason']}"))
    diagnosis = run.diagnosis or {}
    for name, evidence in diagnosis.get("suspects", {}).items():
        found.append(Failure((name,), f"suspect {name}: " + ("; ".join(evidence[:2]) or "no evidence recorded")))
    for kind in ("undecided", "lost"):
        found += [Failure((name,), f"{kind} {name}: {why}") for name, why in diagnosis.get(kind, {}).items()]
    return found


# The verdict


def _run_facts(run: Run) -> str:
    doc = run.doc
    if run.command == "diagnose":
        return f"<p class='muted'>rdmaprov diagnose: {_e(doc['rounds'])} round(s) of pair tests</p>"
    facts = (
        f"rdmaprov {doc['command']} of cluster {doc['cluster']} ({doc['inventory']}), started {doc['started_at']}, "
        f"{doc['duration_s']:g} s, {len(run.nodes())} nodes; rdmaprov {doc['rdmaprov_version']}"
    )
    return f"<p class='muted'>{_e(facts)}</p>"


def _verdict(run: Run, found: list[Failure]) -> str:
    """Ready or not, the exit code and what it means, what fails and which nodes it names."""
    meaning = INTERRUPTED if run.exit_code == 130 else EXIT_MEANINGS[run.command].get(run.exit_code, "")
    ready = run.exit_code in (0, 2)
    word, css = ("READY", "ready") if ready else ("NOT READY", "not-ready")
    if ready and not run.judged:
        word, css = "NOT JUDGED", "unjudged"
    parts = [f"<div class='verdict {css}'><p class='word'>{_e(word)}</p>"]
    parts.append(f"<p><b>exit {_e(run.exit_code)}</b>: {_e(meaning)}</p>")
    named = Counter(node for failure in found for node in failure.nodes)
    if named:
        ranked = ", ".join(f"{node} ({times})" for node, times in named.most_common())
        parts.append(f"<p>failing nodes (how many failures name each): <b>{_e(ranked)}</b></p>")
    if found:
        shown = [f.text for f in found[:MOST_LISTED]]
        more = [f"and {len(found) - MOST_LISTED} more failures: see below"] if len(found) > MOST_LISTED else []
        parts.append("<p>what fails:</p>" + _list(shown + more))
    if not run.judged:
        parts.append("<p>nothing was verified (--skip-verify): the nodes were only converged</p>")
    elif run.verify is not None and not run.gates and run.command != "diagnose":
        parts.append("<p class='muted'>no gate ran (verify --gates, check --gates or apply run them)</p>")
    warned = [g for g in run.gates if _status(g) == "warn"]
    if warned:
        parts.append(f"<p>{len(warned)} gate result(s) passed with a warning (below the warning level, or drift)</p>")
    not_run = run.doc.get("gates_not_run") or {}
    if not_run:
        parts.append(_list(f"gates not run on {name}: {why}" for name, why in not_run.items()))
    return "".join(parts) + "</div>"


# Nodes: checks, health findings, fleet outliers


def _kind(finding: Doc) -> str:
    check_id = finding.get("id") or ""
    if check_id.startswith("fleet."):
        return "fleet outliers"
    return "health findings" if check_id in HEALTH_CHECKS else "checks"


def _finding_rows(findings: Iterable[Doc]) -> list[tuple[str, Sequence[object]]]:
    rows: list[tuple[str, Sequence[object]]] = []
    for f in findings:
        status = "unknown" if f.get("unknown") else "ok" if f["ok"] else "FAIL"
        drift = f" ({f['drift']})" if f.get("drift") else ""
        css = "warn" if status == "unknown" else "" if f["ok"] else "fail"
        rows.append((css, [status + drift, f["check"], f["subject"], f["expected"], f["found"], f.get("hint") or ""]))
    return rows


FINDING_HEADERS = ("verdict", "check", "subject", "expected", "found", "hint")


def _node_section(host: Doc) -> str:
    """One node's failing and unknown findings by kind in the open, all of them folded below."""
    name, findings = host["name"], host["findings"]
    shown = [f for f in findings if not f["ok"] or f.get("unknown")]
    parts = [f"<h3>{_e(name)} <span class='muted'>{_e(host['address'])}, {_e(host['status'])}</span></h3>"]
    if host.get("error"):
        parts.append(f"<p><b>{_e(host['status'])}</b>: {_e(host['error'])}</p>")
    for kind in ("checks", "health findings", "fleet outliers"):
        mine = [f for f in shown if _kind(f) == kind]
        if mine:
            parts.append(f"<p>{_e(kind)}</p>" + _table(FINDING_HEADERS, _finding_rows(mine)))
    everything = _table(
        ("kind", *FINDING_HEADERS),
        [(css, [_kind(f), *cells]) for f, (css, cells) in zip(findings, _finding_rows(findings), strict=True)],
    )
    parts.append(_fold(f"all {len(findings)} findings of {name}", everything))
    return "".join(parts)


NODE_HEADERS = ("verify", "checks", "health findings", "fleet outliers", "gate failures")


def _node_cells(host: Doc | None, gates: list[Doc]) -> list[object]:
    """A node's verify status and its counts of failures by kind (a node not verified: dashes)."""
    if host is None:
        return ["not verified", "—", "—", "—", "—"]
    findings = host["findings"]
    failed = [f for f in findings if not f["ok"] and not f.get("unknown")]
    count = {kind: sum(_kind(f) == kind for f in failed) for kind in ("checks", "health findings", "fleet outliers")}
    gate_failures = sum(_status(g) == "fail" and host["name"] in _gate_hosts(g) for g in gates)
    unknown = sum(bool(f.get("unknown")) for f in findings)
    checks = f"{count['checks']} fail, {unknown} unknown of {len(findings)}"
    return [host["status"], checks, count["health findings"], count["fleet outliers"], gate_failures]


def _nodes(run: Run) -> str:
    """The table of nodes, then the findings of each node that fails in the open, the others folded."""
    if not run.verify and not run.hosts:
        return ""
    verified = {v["name"]: v for v in run.verify or []}
    applied = {h["name"]: h for h in run.hosts}
    rows: list[tuple[str, Sequence[object]]] = []
    for name in [*verified, *(n for n in applied if n not in verified)]:
        cells = _node_cells(verified.get(name), run.gates)
        apply_cell = [applied[name]["status"] if name in applied else "—"] if run.hosts else []
        apply_failed = name in applied and applied[name]["status"] in ("failed", "unreachable", "skipped")
        failing = apply_failed or cells[0] not in ("ok", "not verified") or bool(cells[-1])
        address = (verified.get(name) or applied[name])["address"]
        rows.append(("fail" if failing else "", [name, address, *apply_cell, *cells]))
    headers = ["node", "address", *(["apply"] if run.hosts else []), *NODE_HEADERS]
    parts = ["<h2>Nodes</h2>", _table(headers, rows)]
    failing_hosts = [host for host in verified.values() if host["status"] != "ok"]
    parts += [_node_section(host) for host in failing_hosts]
    others = [_node_section(host) for host in verified.values() if host["status"] == "ok"]
    if others:
        parts.append(_fold(f"the findings of the {len(others)} nodes that pass verify", "".join(others)))
    return "".join(parts)


# Gates: all_reduce's sweep, pairs, the node × rail matrix, latency per pair, baselines

GATE_ORDER = (
    "node",
    "ib_write_bw",
    "container",
    "container_latency",
    "rail",
    "latency",
    "incast",
    "all_reduce",
    "workload",
)
SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skipped": 0}
RESULT_HEADERS = ("gate", "subject", "verdict", "measured", "threshold", "why")


def _size_text(size: float) -> str:
    """A message size as nccl-tests' -b and -e write it: K, M and G are binary multiples."""
    for suffix, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor:
            return f"{size / factor:g}{suffix}"
    return f"{size:g}"


def _result_row(result: Doc) -> tuple[str, Sequence[object]]:
    status, unit = _status(result), result.get("unit") or ""
    attempts = result.get("attempts", 1)
    why = result["reason"] + (f" (attempt {attempts})" if isinstance(attempts, int) and attempts > 1 else "")
    cells = [
        result["gate"],
        result["subject"],
        _badge(status),
        _figure(result.get("measured"), unit),
        _figure(result.get("threshold"), unit),
        why,
    ]
    return (status if status in ("fail", "warn") else "", cells)


def _is_result(item: object) -> bool:
    """A gate result's JSON (one a diagnosis keeps inside another's details is not schema-checked)."""
    return isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("gate", "subject", "reason"))


def _lanes(results: list[Doc], gate: str) -> list[Doc]:
    """The per-rail results of `gate`, with the rails a diagnosis' pair verdict keeps in its details."""
    lanes: list[Doc] = []
    for result in results:
        if result["gate"] != gate:
            continue
        inner = _details(result).get("rails")
        lanes += [r for r in inner if _is_result(r)] if isinstance(inner, list) else [result]
    return lanes


def _rail(result: Doc) -> int | None:
    """The rail a result is about: its details' index, else its subject's "… rail N" (a rail only
    one node has); None for a pair that failed before its rails ran."""
    rail = _details(result).get("rail")
    if isinstance(rail, int) and not isinstance(rail, bool):
        return rail
    return Subject.parse(result["subject"]).rail


def _worst(results: Sequence[Doc], higher_is_worse: bool) -> Doc:
    """The result that fares worst: the gravest verdict, then the lowest (or highest) figure."""
    sign = 1.0 if higher_is_worse else -1.0
    return max(results, key=lambda r: (SEVERITY.get(_status(r), 3), sign * (_number(r.get("measured")) or 0.0)))


def _matrix(
    corner: str, rows: Sequence[str], cells: dict[tuple[str, int | None], list[Doc]], higher_is_worse: bool
) -> str:
    """A table of rows × rails, each cell coloured by the worst verdict of its results and showing
    that result's figure; every result's subject and reason in the cell's tooltip."""
    rails = sorted({rail for _, rail in cells if rail is not None})
    columns: list[int | None] = [*rails, *([None] if any(rail is None for _, rail in cells) else [])]
    head = (
        f"<tr><th>{_e(corner)}</th>"
        + "".join(f"<th>{'rail ' + str(c) if c is not None else 'pair'}</th>" for c in columns)
        + "</tr>"
    )
    lines = [head]
    for row in rows:
        tds = []
        for column in columns:
            results = cells.get((row, column))
            if not results:
                tds.append("<td></td>")
                continue
            worst = _worst(results, higher_is_worse)
            status = _status(worst)
            figure = _number(worst.get("measured"))
            text = f"{figure:.3g}" if figure is not None else status.upper()
            tip = "\n".join(f"{r['subject']}: {r['reason']}" for r in results)
            tds.append(f'<td class="{VERDICT_CLASS.get(status, "fail")}" title="{_e(tip)}">{_e(text)}</td>')
        lines.append(f"<tr><th>{_e(row)}</th>{''.join(tds)}</tr>")
    return "<table class='matrix'>" + "".join(lines) + "</table>"


def _pair_label(result: Doc) -> str:
    hosts = Subject.parse(result["subject"]).hosts
    return " -> ".join(hosts[:1] + hosts[-1:]) if len(hosts) > 1 else result["subject"]


def _bars(title: str, results: Sequence[Doc], label: Callable[[Doc], str], what: str) -> str:
    """A bar per result at its figure (0 where it gave none), coloured by its verdict, with a rule
    at the threshold they share, or where thresholds differ, a mark on each bar at its own."""
    thresholds = sorted({t for r in results if (t := _number(r.get("threshold"))) is not None})
    shared = len(thresholds) == 1
    bars = [
        Bar(
            label(r),
            _number(r.get("measured")) or 0.0,
            VERDICT_CLASS.get(_status(r), "fail"),
            f"{r['subject']}: {r['reason']}",
            None if shared else _number(r.get("threshold")),
        )
        for r in results
    ]
    unit = results[0].get("unit") or ""
    rules = [Rule(thresholds[0], f"threshold {thresholds[0]:.4g} {unit}")] if shared else []
    top = max([b.value for b in bars] + [b.mark or 0.0 for b in bars] + thresholds)
    return bar_chart(title, bars, Axis.linear(f"{what} ({unit})", top * 1.05 or 1.0), rules)


def _sweep(result: Doc) -> list[tuple[float, float]]:
    """(size, busbw) of each row of an all_reduce's sweep above 0 bytes (a log axis has no 0)."""
    rows = _details(result).get("rows")
    points = []
    for row in rows if isinstance(rows, list) else []:
        size = _number(row.get("size")) if isinstance(row, dict) else None
        busbw = _number(row.get("busbw")) if isinstance(row, dict) else None
        if size and size > 0 and busbw is not None:
            points.append((size, busbw))
    return points


def _all_reduce(results: list[Doc]) -> str:
    """Each all_reduce run: its verdict with the sums, then busbw against message size, the
    threshold and the per-node NIC bandwidth drawn across."""
    parts = ["<h3>all_reduce: bus bandwidth by message size</h3>"]
    for result in results:
        details, unit = _details(result), result.get("unit") or "GB/s"
        about = ", ".join(f"{key} {details[key]}" for key in ("kind", "ranks", "via") if key in details)
        parts.append(
            f"<p>{_badge(_status(result))} <b title='{_e(result['subject'])}'>{_e(_short(result['subject']))}"
            f"</b> {_e(about)}: {_e(result['reason'])}</p>"
        )
        points = _sweep(result)
        if not points:
            parts.append("<p class='muted'>no per-size rows in this result: the run gave none</p>")
            continue
        rules = []
        if (threshold := _number(result.get("threshold"))) is not None:
            rules.append(Rule(threshold, f"threshold {threshold:.4g} {unit}"))
        else:
            parts.append("<p class='muted'>no threshold drawn: the run gave no figure to judge</p>")
        if (expected := _number(result.get("expected"))) is not None:
            rules.append(Rule(expected, f"NIC bandwidth {expected:.4g} {unit}", stroke="#777"))
        sizes = [size for size, _ in points]
        x = Axis.powers_of_two("message size (bytes; K, M, G: binary multiples)", min(sizes), max(sizes), _size_text)
        y = Axis.linear(f"busbw ({unit})", max([b for _, b in points] + [r.value for r in rules]) * 1.05 or 1.0)
        title = f"all_reduce busbw by message size, {_short(result['subject'])}"
        parts.append(line_chart(title, [Series("busbw, out of place", points)], x, y, rules))
    return "".join(parts)


def _rail_matrix(run: Run, lanes: list[Doc], title: str) -> str:
    """Nodes × rails of ib_write_bw per HCA: each node's cell holds its rail's results as server
    and as client, the lowest figure shown."""
    cells: dict[tuple[str, int | None], list[Doc]] = {}
    for lane in lanes:
        for host in dict.fromkeys(Subject.parse(lane["subject"]).hosts):
            cells.setdefault((host, _rail(lane)), []).append(lane)
    tested = list(dict.fromkeys(host for host, _ in cells))
    rows = [node for node in run.nodes() if node in tested] + [h for h in tested if h not in run.nodes()]
    legend = "<p class='muted'>Gb/s of each node's rail (the lowest of its tests), coloured pass, warn, fail"
    legend += " against its threshold; a cell's tooltip has each test's sums</p>"
    matrix = _matrix("node", rows, cells, higher_is_worse=False)
    return f"<h3>{_e(title)}</h3>" + legend + matrix + _results(lanes, "rail")


def _latency(lanes: list[Doc]) -> str:
    """p99 per pair: the worst rail of each pair as a bar against the limit, then pairs × rails."""
    pairs: dict[str, list[Doc]] = {}
    for lane in lanes:
        pairs.setdefault(_pair_label(lane), []).append(lane)
    worst = [_worst(results, higher_is_worse=True) for results in pairs.values()]
    chart = _bars("ib_write_lat p99 per pair (its worst rail)", worst, _pair_label, "p99")
    cells: dict[tuple[str, int | None], list[Doc]] = {}
    for lane in lanes:
        cells.setdefault((_pair_label(lane), _rail(lane)), []).append(lane)
    matrix = _fold(
        f"p99 of each rail of the {len(pairs)} pairs", _matrix("pair", list(pairs), cells, higher_is_worse=True), True
    )
    return "<h3>latency: p99 per pair</h3>" + chart + matrix + _results(lanes, "latency")


def _baseline_row(result: Doc) -> tuple[str, Sequence[object]]:
    base, unit = result["baseline"], result.get("unit") or ""
    change = _number(base.get("change"))
    cells = [
        result["gate"],
        result["subject"],
        _figure(base.get("value"), unit),
        base.get("runs", ""),
        base.get("since") or "",
        _figure(result.get("measured"), unit),
        "—" if change is None else f"{change:+.1%}",
        "DRIFT" if base.get("drift") else "steady",
    ]
    return ("warn" if base.get("drift") else "", cells)


def _baselines(results: list[Doc]) -> str:
    """Each part against its baseline: the parts that drifted in the open, the steady ones folded."""
    kept = [r for r in results if isinstance(r.get("baseline"), dict) and _number(r["baseline"].get("value"))]
    recording = sum(isinstance(r.get("baseline"), dict) for r in results) - len(kept)
    if not kept and not recording:
        return ""
    headers = ("gate", "part", "baseline", "runs", "since", "this run", "change", "")
    drift = sorted(
        (r for r in kept if r["baseline"].get("drift")), key=lambda r: -abs(r["baseline"].get("change") or 0)
    )
    steady = [r for r in kept if not r["baseline"].get("drift")]
    parts = ["<h3>baselines: each part against its own past</h3>"]
    if drift:
        parts.append(f"<p>{len(drift)} part(s) drifted from their baseline</p>")
        parts.append(_table(headers, map(_baseline_row, drift)))
    if steady:
        parts.append(_fold(f"{len(steady)} part(s) steady", _table(headers, map(_baseline_row, steady))))
    if recording:
        parts.append(f"<p class='muted'>{recording} part(s) still recording their baseline</p>")
    return "".join(parts)


def _results(results: list[Doc], what: str) -> str:
    """Results that fail or warn in a table in the open, every one of them folded below."""
    shown = [r for r in results if _status(r) in ("fail", "warn")]
    table = _table(RESULT_HEADERS, map(_result_row, shown)) if shown else ""
    return table + _fold(f"every {what} result ({len(results)})", _table(RESULT_HEADERS, map(_result_row, results)))


def _gate_summary(results: list[Doc]) -> str:
    rows = []
    for gate in GATE_ORDER:
        mine = [_status(r) for r in results if r["gate"] == gate]
        if mine:
            counts = [mine.count(status) for status in ("pass", "warn", "fail", "skipped")]
            rows.append(("fail" if counts[2] else "warn" if counts[1] else "", [gate, *counts]))
    return _table(("gate", "pass", "warn", "fail", "skipped"), rows)


def _gates(run: Run) -> str:
    if not run.gates:
        return ""
    by_gate = {gate: [r for r in run.gates if r["gate"] == gate] for gate in GATE_ORDER}
    parts = ["<h2>Gates</h2>", _gate_summary(run.gates)]
    if by_gate["all_reduce"]:
        parts.append(_all_reduce(by_gate["all_reduce"]))
    if by_gate["ib_write_bw"]:
        parts.append("<h3>ib_write_bw: each pair's first HCA</h3>")
        parts.append(_bars("ib_write_bw per pair", by_gate["ib_write_bw"], _pair_label, "bandwidth"))
        parts.append(_results(by_gate["ib_write_bw"], "ib_write_bw"))
    if by_gate["container"]:
        parts.append(
            "<h3>container: ib_write_bw in the site's image</h3>" + _results(by_gate["container"], "container")
        )
    if in_image := by_gate["container_latency"]:
        parts.append(
            "<h3>container_latency: ib_write_lat p99 in the site's image</h3>" + _results(in_image, "container_latency")
        )
    if lanes := _lanes(run.gates, "rail"):
        parts.append(_rail_matrix(run, lanes, "rails: node × rail, ib_write_bw on every HCA"))
    if lanes := _lanes(run.gates, "latency"):
        parts.append(_latency(lanes))
    if by_gate["incast"]:
        parts.append("<h3>incast: several senders into one node</h3>" + _results(by_gate["incast"], "incast"))
    if by_gate["node"]:
        parts.append("<h3>node gate: each node alone</h3>" + _results(by_gate["node"], "node gate"))
    if by_gate["workload"]:
        parts.append("<h3>workload: the site's own command</h3>" + _results(by_gate["workload"], "workload"))
    parts.append(_baselines(run.gates))
    return "".join(parts)


# The diagnosis


def _diagnosis(run: Run) -> str:
    """Suspects with their evidence, who else was undecided, lost or cleared, then each step's tests."""
    diagnosis = run.diagnosis
    if diagnosis is None:
        return ""
    parts = [f"<h2>Diagnosis: {_e(diagnosis['rounds'])} round(s) of pair tests</h2>"]
    rows: list[tuple[str, Sequence[object]]] = [
        ("fail", [name, "SUSPECT", _list(evidence)]) for name, evidence in diagnosis["suspects"].items()
    ]
    rows += [("warn", [name, "UNDECIDED", why]) for name, why in diagnosis["undecided"].items()]
    rows += [("fail", [name, "LOST", why]) for name, why in (diagnosis.get("lost") or {}).items()]
    if rows:
        parts.append(_table(("node", "verdict", "evidence"), rows))
    cleared = diagnosis["cleared"]
    parts.append(f"<p>cleared ({len(cleared)}): {_e(', '.join(cleared) or 'none')}</p>")
    if diagnosis.get("advice"):
        parts.append(f"<p><b>to settle it:</b> {_e(diagnosis['advice'])}</p>")
    steps: dict[str, list[Doc]] = {}
    for test in diagnosis["tests"]:
        step = _details(test).get("step")
        steps.setdefault(step if isinstance(step, str) else "tests", []).append(test)
    for step, tests in steps.items():
        what = DIAGNOSIS_STEPS.get(step, "")
        heading = f"{step}: {what}" if what else step
        parts.append(f"<h3>{_e(heading)} ({len(tests)} tests)</h3>" + _table(RESULT_HEADERS, map(_result_row, tests)))
    if lanes := _lanes(diagnosis["tests"], "rail"):
        parts.append(_rail_matrix(run, lanes, "the diagnosis' rails: node × rail"))
    return "".join(parts)


def render(doc: Doc) -> str:
    """The page for a run's (or a diagnosis') JSON, checked as read_run checks it."""
    run = Run.of(doc)
    found = _failures(run)
    ready = (
        "ready" if run.exit_code in (0, 2) and run.judged else "not judged" if run.exit_code in (0, 2) else "not ready"
    )
    cluster = f" of {run.doc['cluster']}" if run.command != "diagnose" else ""
    title = f"rdmaprov {run.command}{cluster}: {ready}"
    body = [f"<h1>{_e(title)}</h1>", _run_facts(run), _verdict(run, found), _nodes(run), _gates(run), _diagnosis(run)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        # nothing may be fetched or run, even if a value escaped its escaping
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )
