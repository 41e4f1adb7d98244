"""Every test result of `dcgmi diag -r N -j` (DCGM's active diagnostic), per GPU: the one check that
exercises each GPU's memory, PCIe link, power and compute before a node is trusted with a job.

The JSON changed shape across DCGM releases, and all of them are read:

- 2.x/3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids": "0,1,2,3" | "gpu_id": "0", "status": "Pass", "warnings": [...], "info": ...}]}]}],
  "version": ...}}`. Deployment checks name every GPU at once (`gpu_ids` "0,1,2,3": node-wide);
  warnings are strings (2.x) or `{"warning", "error_id", ...}` objects (3.x); `info` is a string or a
  list. NVVS's own output (which 3.x dcgmi relays) leaves `null` between tests and numeric `gpu_ids`.
- 4.x: the top key is `"DCGM Diagnostic"`, results name an entity (`"entity_group": "GPU",
  "entity_id": 0`), each test carries a `test_summary`, and the version moved to a top-level
  `"metadata": {"version", "Driver Version Detected"}`. A diagnostic that could not run at all says
  so in `"DCGM Diagnostic": {"runtime_error": ...}`.

dcgmi prints plain text instead of JSON when it cannot reach the host engine
(`Error: unable to establish a connection to the specified host: localhost` /
`Error: Unable to connect to host engine. Host engine connection invalid/disconnected.`), and NVVS
has printed warnings before its JSON; both are handled. Whatever cannot be read becomes
`DiagResult.unknown` with the reason, never an exception and never an empty "all passed".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# dcgmi's words when it cannot reach nv-hostengine (the nvidia-dcgm service)
_NO_ENGINE = re.compile(r"host engine|connection to the specified host", re.IGNORECASE)
_DOC_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip"}
_ERROR_LINE = re.compile(r"^\s*Error:\s*(.+?)\s*$", re.MULTILINE)
_MAX_STARTS = 200  # '{' positions tried before giving up on finding the document


@dataclass(frozen=True)
class DiagTest:
    """One test's result for one GPU (or for the node, when the result names no single GPU)."""

    category: str  # "Deployment", "Hardware", "Integration", "Stress", "Custom" ...
    name: str  # "Memory", "PCIe", "Diagnostic", "software", "memory_bandwidth" ...
    gpu: str | None  # GPU index as dcgmi names it; None for a node-wide result
    status: str  # "pass", "fail", "warn", "skip", or the raw word lowercased ("not run", ...)
    message: str  # warnings/errors, then info, joined with "; "; "" if none
    entity: str | None = None  # a non-GPU entity a 4.x result names ("CPU 0", "NvSwitch 2"), else None


@dataclass(frozen=True)
class DiagResult:
    level: int | None  # the run level when the JSON says it
    version: str | None  # DCGM version when the JSON says it
    tests: list[DiagTest] = field(default_factory=list)
    unknown: str | None = None  # why the output could not be read; None when it was

    def failed(self) -> list[DiagTest]:
        return [test for test in self.tests if test.status == "fail"]

    def by_status(self, status: str) -> list[DiagTest]:
        return [test for test in self.tests if test.status == status]


def parse_diag(text: str) -> DiagResult:
    """Read `dcgmi diag -j` output; `unknown` says why it could not be read, if it could not."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return DiagResult(None, None, [], "empty dcgmi output")
    document, found_json = _find_document(text)
    if document is None:
        return DiagResult(None, None, [], _why_no_document(text, found_json))
    body = _body(document)
    version = _version(document, body)
    level = _level(document, body)
    runtime_error = body.get("runtime_error")
    if runtime_error:
        return DiagResult(level, version, [], f"DCGM diagnostic did not run: {runtime_error}")
    tests = _tests(body)
    if not tests:
        return DiagResult(level, version, [], "the DCGM diagnostic document lists no test results")
    return DiagResult(level, version, tests, None)


def _find_document(text: str) -> tuple[dict[str, object] | None, bool]:
    """The first JSON object in the text that is a diagnostic document, and whether any JSON parsed."""
    decoder = json.JSONDecoder()
    found_json = False
    start = text.find("{")
    for _ in range(_MAX_STARTS):
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        found_json = True
        if isinstance(value, dict) and any(isinstance(value.get(key), dict) for key in _DOC_KEYS):
            return value, True
        start = text.find("{", end)
    return None, found_json


def _why_no_document(text: str, found_json: bool) -> str:
    errors = _ERROR_LINE.findall(text)
    if errors:
        said = " / ".join(errors)
        engine = " (is nvidia-dcgm, its host engine, running?)" if _NO_ENGINE.search(said) else ""
        return f"dcgmi printed an error instead of JSON: {said}{engine}"
    if found_json:
        return "JSON found, but it is not a DCGM diagnostic document (no 'DCGM Diagnostic' object)"
    if "{" in text:
        return "no parseable JSON in dcgmi output (truncated or corrupted)"
    first = text.strip().splitlines()[0][:120]
    return f"dcgmi output is not JSON: {first!r}"


def _body(document: dict[str, object]) -> dict[str, object]:
    for key in _DOC_KEYS:
        value = document.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _version(document: dict[str, object], body: dict[str, object]) -> str | None:
    metadata = document.get("metadata")
    for holder in (metadata if isinstance(metadata, dict) else {}, body, document):
        value = holder.get("version")
        if isinstance(value, (str, int, float)) and str(value).strip():
            return str(value).strip()
    return None


def _level(document: dict[str, object], body: dict[str, object]) -> int | None:
    metadata = document.get("metadata")
    for holder in (metadata if isinstance(metadata, dict) else {}, body, document):
        for key in ("level", "run_level", "runLevel"):
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().isdigit():
                return int(value)
    return None


def _tests(body: dict[str, object]) -> list[DiagTest]:
    tests: list[DiagTest] = []
    for category in _dicts(body.get("test_categories")):
        name = str(category.get("category") or "")
        for test in _dicts(category.get("tests")):
            tests.extend(_test_results(name, test))
    return tests


def _test_results(category: str, test: dict[str, object]) -> list[DiagTest]:
    """One DiagTest per result; the 4.x test_summary too when it carries words of its own or is all there is."""
    name = str(test.get("name") or "")
    results = [_result(category, name, result) for result in _dicts(test.get("results"))]
    summary = test.get("test_summary")
    if isinstance(summary, dict) and (not results or _message(summary)):
        results.append(DiagTest(category, name, None, _status(summary.get("status")), _message(summary)))
    return results


def _result(category: str, name: str, result: dict[str, object]) -> DiagTest:
    gpu, entity = _who(result)
    return DiagTest(category, name, gpu, _status(result.get("status")), _message(result), entity)


def _who(result: dict[str, object]) -> tuple[str | None, str | None]:
    """(GPU index, other entity) a result names; (None, None) for a node-wide result."""
    group = result.get("entity_group")
    if "entity_id" in result:
        entity_id = str(result["entity_id"])
        if group in (None, "GPU") or result.get("entity_group_id") == 1:
            return entity_id, None
        return None, f"{group} {entity_id}"
    for key in ("gpu_id", "gpu_ids"):
        if key in result and result[key] is not None:
            ids = [part.strip() for part in str(result[key]).split(",") if part.strip()]
            return (ids[0], None) if len(ids) == 1 else (None, None)
    return None, None


def _status(value: object) -> str:
    word = str(value or "").strip().lower()
    return _STATUS.get(word, word) if word else "unknown"


def _message(result: dict[str, object]) -> str:
    parts: list[str] = []
    for key in ("errors", "warnings", "warning", "error", "info"):
        parts.extend(_texts(result.get(key)))
    return "; ".join(part for part in parts if part)


def _texts(value: object) -> list[str]:
    """Message strings from a string, a list of strings, or 3.x/4.x `{"warning": ...}` objects."""
    if isinstance(value, str):
        return [value.strip()]
    if isinstance(value, dict):
        for key in ("warning", "error", "msg", "message", "info"):
            if isinstance(value.get(key), str):
                return [value[key].strip()]
        return []
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return []


def _dicts(value: object) -> list[dict[str, object]]:
    """The objects of a JSON list; the nulls NVVS leaves between tests (and anything else) dropped."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
