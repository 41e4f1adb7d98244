"""Validate inventory data against the JSON schema and turn each error into a Problem a person can act on."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from rdmaprov.errors import Problem
from rdmaprov.inventory.model import resolve_ref
from rdmaprov.inventory.source import DocPath, SourceMap
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


def _whole_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
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


def _inline_refs(node: Any, root: dict[str, Any]) -> Any:
    """The schema with every local `$ref` replaced by what it names (the inventory schema has no
    cycles). Validation then never resolves a reference: half the time of 10,000 hosts. Where a
    reference has sibling keywords, the referenced schema's own win, as in its error messages."""
    if isinstance(node, list):
        return [_inline_refs(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = resolve_ref({"$ref": node["$ref"]}, root)
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return {**_inline_refs(siblings, root), **_inline_refs(target, root)}
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


def _allowed_keys(schema: dict[str, Any]) -> list[str]:
    return sorted(schema.get("properties", {}))


def _explain(error: ValidationError, smap: SourceMap) -> list[Problem]:
    """One schema error → the Problems it stands for (an unknown-keys error may name several keys)."""
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    hint = schema.get("description", "")
    kind = error.validator
    # What the validator reported on: Unset only in a ValidationError built by hand, never in one
    # that validation raised. Both are JSON data: the inventory's value and the schema's rule.
    value: Any = error.instance
    rule: Any = error.validator_value

    if kind == "additionalProperties" and isinstance(value, dict):
        allowed = _allowed_keys(schema)
        problems: list[Problem] = []
        for key in value:
            if key in allowed:
                continue
            guess = _suggest(key, allowed)
            fix = guess or (f"allowed keys here: {', '.join(allowed)}" if allowed else "remove it")
            problems.append(smap.problem(path + (key,), f"unknown key {key!r}", fix, prefer_key=True))
        return problems
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [smap.problem(path, f"missing required key {missing!r}", f"add `{missing}:` here")]
    if kind == "type":
        expected = _expected_types(rule)
        return [
            smap.problem(
                path,
                f"expected {expected}, found {_describe(value)}",
                f"write {expected}" + (f" — {hint}" if hint else ""),
            )
        ]
    if kind == "enum":
        options = [str(o) for o in rule]
        guess = _suggest(str(value), options)
        fix = (guess + " " if guess else "") + f"use one of: {', '.join(options)}"
        return [smap.problem(path, f"{_describe(value)} is not allowed", fix)]
    if kind == "const":
        return [smap.problem(path, f"expected {rule!r}, found {_describe(value)}", hint)]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "more than",
            "exclusiveMaximum": "less than",
        }
        bounds = []
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key in schema:
                bounds.append(f"{words[key]} {schema[key]}")
        expect = " and ".join(bounds)
        return [
            smap.problem(
                path,
                f"{_describe(value)} is out of range: must be {expect}",
                f"use a value {expect}" + (f" — {hint}" if hint else ""),
            )
        ]
    if kind == "pattern" and "propertyNames" in error.schema_path:
        return [
            smap.problem(path + (value,), f"name {_describe(value)} is not allowed", hint or _NAME_FIX, prefer_key=True)
        ]
    if kind == "pattern":
        form = "" if hint else f" ({rule})"
        return [smap.problem(path, f"{_describe(value)} does not have the expected form{form}", hint)]
    if kind in ("minLength", "minItems"):
        return [smap.problem(path, "must not be empty", hint)]
    if kind == "propertyNames":
        bad = error.instance
        return [
            smap.problem(
                path + (bad,) if isinstance(bad, str) else path,
                f"name {_describe(bad)} is not allowed",
                _NAME_FIX,
                prefer_key=True,
            )
        ]
    if kind in ("anyOf", "oneOf") and error.context:
        # Report the branch that matches the value's own type: that is what the user meant to write.
        # A branch whose root type differs from the value is not what the user meant; report the rest.
        relevant = [sub for sub in error.context if sub.relative_path or sub.validator not in ("type", "const")]
        if not relevant:
            types: list[Any] = [sub.validator_value for sub in error.context if sub.validator == "type"]
            flat = [t for ts in types for t in ([ts] if isinstance(ts, str) else ts)]
            consts = [repr(sub.validator_value) for sub in error.context if sub.validator == "const"]
            expected = " or ".join(consts + ([_expected_types(flat)] if flat else []))
            return [smap.problem(path, f"expected {expected}, found {_describe(value)}", hint)]
        problems = []
        for sub in relevant:
            problems.extend(_explain(sub, smap))
        return problems
    return [smap.problem(path, error.message, hint)]


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
