"""Validate inventory data against the JSON schema and turn each error into a Problem a person can act on."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from rdmaprov.errors import Problem
from rdmaprov.inventory.docpath import DocPath
from rdmaprov.inventory.model import resolve_ref
from rdmaprov.inventory.source import SourceMap
from rdmaprov.schemas import load_schema

# Keys whose values are shell scripts: lines and tabs are their syntax. Every other string in an
# inventory is one line of printable text (a newline there would start a new line in the config
# file or command it ends up in).
SCRIPT_KEYS = {"build", "after_install"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SCRIPT_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAME_FIX = "use letters, digits, '_', '.' and '-', starting with a letter or digit"
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _whole_pattern(
    validator: object, pattern: str, instance: object, schema: Mapping[str, object]
) -> Iterator[ValidationError]:
    """`pattern` as JSON Schema (ECMA-262) means it: a final `$` is the end of the string.

    Python's `$` also matches before a trailing newline, so `^[a-z]+$` would accept "gpu1\\n".
    """
    if not isinstance(instance, str):
        return
    match = _regex(pattern).search(instance)
    anchored = pattern.endswith("$") and not pattern.endswith("\\$")
    if match is None or (anchored and match.end() != len(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _is_integer(checker: Any, instance: Any) -> bool:
    """An integer is written as one: 22.0 is a float in YAML and is refused where a count or port is wanted."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _inline_refs(node: object, root: Mapping[str, object]) -> object:
    """The schema with every local `$ref` replaced by what it names (the inventory schema has no
    cycles). Validation then never resolves a reference: half the time of 10,000 hosts."""
    if isinstance(node, list):
        return [_inline_refs(item, root) for item in node]
    return _inline_mapping(node, root) if isinstance(node, dict) else node


def _inline_mapping(node: Mapping[str, object], root: Mapping[str, object]) -> dict[str, object]:
    """One schema object inlined. Where a reference has sibling keywords, the referenced schema's
    own win, as in its error messages."""
    if "$ref" in node:
        target = resolve_ref({"$ref": node["$ref"]}, root)
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return {**_inline_mapping(siblings, root), **_inline_mapping(target, root)}
    return {key: _inline_refs(value, root) for key, value in node.items() if key != "$defs"}


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"pattern": _whole_pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)

_JSON_TYPES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "nothing",
}


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"number {value}"
    return f"string {value!r}"


def _expected_types(types: str | list[str]) -> str:
    names = [types] if isinstance(types, str) else types
    return " or ".join(_JSON_TYPES.get(t, t) for t in names)


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


def _allowed_keys(schema: Mapping[str, object]) -> list[str]:
    properties = schema.get("properties")
    return sorted(properties) if isinstance(properties, dict) else []


@dataclass(frozen=True)
class _Report:
    """One schema error as the explainers below read it: where, the rule's schema and its
    description (the fix it suggests), the inventory's value and the rule's value."""

    error: ValidationError
    smap: SourceMap
    path: DocPath
    schema: Mapping[str, object]
    hint: str
    # Unset only in a ValidationError built by hand, never in one that validation raised. Both are
    # JSON data: the inventory's value and the schema's rule.
    value: Any
    rule: Any

    def problem(self, message: str, fix: str, where: DocPath | None = None, prefer_key: bool = False) -> Problem:
        return self.smap.problem(self.path if where is None else where, message, fix, prefer_key=prefer_key)


def _explain(error: ValidationError, smap: SourceMap) -> list[Problem]:
    """One schema error → the Problems it stands for (an unknown-keys error may name several keys)."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    report = _Report(
        error,
        smap,
        tuple(error.absolute_path),
        schema,
        str(schema.get("description", "")),
        error.instance,
        error.validator_value,
    )
    kind = str(error.validator)
    if kind == "pattern" and "propertyNames" in error.schema_path:
        kind = "pattern-of-name"
    explainer = _EXPLAINERS.get(kind)
    found = explainer(report) if explainer else None
    return found if found is not None else [report.problem(error.message, report.hint)]


def _unknown_keys(r: _Report) -> list[Problem] | None:
    if not isinstance(r.value, dict):
        return None
    allowed = _allowed_keys(r.schema)
    problems = []
    for key in r.value:
        if key not in allowed:
            fix = _suggest(key, allowed) or (f"allowed keys here: {', '.join(allowed)}" if allowed else "remove it")
            problems.append(r.problem(f"unknown key {key!r}", fix, r.path + (key,), prefer_key=True))
    return problems


def _missing_key(r: _Report) -> list[Problem]:
    message = r.error.message
    missing = message.split("'")[1] if "'" in message else message
    return [r.problem(f"missing required key {missing!r}", f"add `{missing}:` here")]


def _wrong_type(r: _Report) -> list[Problem]:
    expected = _expected_types(r.rule)
    fix = f"write {expected}" + (f" — {r.hint}" if r.hint else "")
    return [r.problem(f"expected {expected}, found {_describe(r.value)}", fix)]


def _not_an_option(r: _Report) -> list[Problem]:
    options = [str(o) for o in r.rule]
    guess = _suggest(str(r.value), options)
    return [
        r.problem(
            f"{_describe(r.value)} is not allowed", (guess + " " if guess else "") + f"use one of: {', '.join(options)}"
        )
    ]


_BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "more than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _out_of_range(r: _Report) -> list[Problem]:
    expect = " and ".join(f"{words} {r.schema[key]}" for key, words in _BOUND_WORDS.items() if key in r.schema)
    fix = f"use a value {expect}" + (f" — {r.hint}" if r.hint else "")
    return [r.problem(f"{_describe(r.value)} is out of range: must be {expect}", fix)]


def _bad_form(r: _Report) -> list[Problem]:
    form = "" if r.hint else f" ({r.rule})"
    return [r.problem(f"{_describe(r.value)} does not have the expected form{form}", r.hint)]


def _bad_name(r: _Report) -> list[Problem]:
    """A mapping key the schema's propertyNames (or its pattern) refuses."""
    bad = r.value
    where = r.path + (bad,) if isinstance(bad, str) else r.path
    return [r.problem(f"name {_describe(bad)} is not allowed", r.hint or _NAME_FIX, where, prefer_key=True)]


def _no_branch(r: _Report) -> list[Problem] | None:
    """anyOf/oneOf: report the branch that matches the value's own type, which is what the user
    meant to write; a branch whose root type differs from the value is not."""
    if not r.error.context:
        return None
    relevant = [sub for sub in r.error.context if sub.relative_path or sub.validator not in ("type", "const")]
    if relevant:
        return [problem for sub in relevant for problem in _explain(sub, r.smap)]
    types: list[Any] = [sub.validator_value for sub in r.error.context if sub.validator == "type"]
    flat = [t for ts in types for t in ([ts] if isinstance(ts, str) else ts)]
    consts = [repr(sub.validator_value) for sub in r.error.context if sub.validator == "const"]
    expected = " or ".join(consts + ([_expected_types(flat)] if flat else []))
    return [r.problem(f"expected {expected}, found {_describe(r.value)}", r.hint)]


# Each validator's explainer; one that returns None leaves the error to jsonschema's own message.
_EXPLAINERS: dict[str, Callable[[_Report], list[Problem] | None]] = {
    "additionalProperties": _unknown_keys,
    "required": _missing_key,
    "type": _wrong_type,
    "enum": _not_an_option,
    "const": lambda r: [r.problem(f"expected {r.rule!r}, found {_describe(r.value)}", r.hint)],
    **{bound: _out_of_range for bound in _BOUND_WORDS},
    "pattern-of-name": _bad_name,
    "pattern": _bad_form,
    "minLength": lambda r: [r.problem("must not be empty", r.hint)],
    "minItems": lambda r: [r.problem("must not be empty", r.hint)],
    "propertyNames": lambda r: [
        r.problem(
            f"name {_describe(r.value)} is not allowed",
            _NAME_FIX,
            r.path + (r.value,) if isinstance(r.value, str) else r.path,
            prefer_key=True,
        )
    ],
    "anyOf": _no_branch,
    "oneOf": _no_branch,
}


@cache
def _validator(schema_name: str) -> Any:
    schema = load_schema(schema_name)
    return _Validator(_inline_refs(schema, schema))


def _unusable_values(value: Any, path: DocPath, smap: SourceMap) -> Iterator[Problem]:
    """What no schema keyword refuses, walked once over the whole document: strings (values and
    keys) with control characters (scripts may have newlines and tabs), and numbers that are not
    finite."""
    if isinstance(value, dict):
        for key, item in value.items():
            found = _CONTROL.search(key) if isinstance(key, str) else None
            if found:
                yield _control_problem(key, found.group(), path + (key,), smap, is_key=True)
            yield from _unusable_values(item, path + (key,), smap)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unusable_values(item, path + (index,), smap)
    elif isinstance(value, str):
        script = bool(path) and path[-1] in SCRIPT_KEYS
        found = (_SCRIPT_CONTROL if script else _CONTROL).search(value)
        if found:
            yield _control_problem(value, found.group(), path, smap, is_key=False)
    elif isinstance(value, float) and not math.isfinite(value):
        yield _infinite_problem(value, path, smap)


def _infinite_problem(value: float, path: DocPath, smap: SourceMap) -> Problem:
    """YAML's .nan and .inf (and a number too large for a float) are floats that the schema's
    ranges miss: NaN compares false with every bound, then breaks the arithmetic it reaches (a
    drain share rounded down raises) or turns a check off (no measurement is above a NaN bound);
    an infinite threshold is none either."""
    name = "not-a-number (.nan)" if math.isnan(value) else "infinity (.inf)" if value > 0 else "minus infinity (-.inf)"
    return smap.problem(
        path,
        f"YAML reads this value as {name}; every number in an inventory must be finite",
        "write a finite number; quote the value if it is text",
    )


def _control_problem(text: str, found: str, path: DocPath, smap: SourceMap, is_key: bool) -> Problem:
    what = _CONTROL_NAMES.get(found, f"the control character {found!r}")
    where = "name" if is_key else "value"
    return smap.problem(
        path,
        f"the {where} {text!r} contains {what}",
        "write it on one line without control characters: it ends up in config files and commands on the nodes",
        prefer_key=is_key,
    )


def schema_problems(data: Any, smap: SourceMap, schema_name: str = "inventory") -> list[Problem]:
    """Every schema violation in `data`, in document order.

    A string with a control character, or a number that is not finite, is reported once, as
    such, not also for its pattern, type or range.
    """
    problems = list(_unusable_values(data, (), smap))
    flagged = {p.path for p in problems}
    for error in _validator(schema_name).iter_errors(data):
        problems.extend(p for p in _explain(error, smap) if p.path not in flagged)
    # An empty value also misses its pattern: "must not be empty" says it better, once.
    empty = {p.path for p in problems if p.message == "must not be empty"}
    unique = {
        (p.line, p.column, p.path, p.message): p
        for p in problems
        if p.path not in empty or p.message == "must not be empty"
    }
    return sorted(unique.values(), key=lambda p: (p.line or 0, p.column or 0, p.path))
