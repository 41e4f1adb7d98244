"""Validate inventory data against the JSON schema and turn each error into a Problem a person can act on."""

from __future__ import annotations

import difflib
from typing import Any, Iterable

import jsonschema
from jsonschema.exceptions import ValidationError

from rdmaprov.errors import Problem
from rdmaprov.inventory.source import SourceMap
from rdmaprov.schemas import load_schema

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
    value = error.instance

    if kind == "additionalProperties" and isinstance(value, dict):
        allowed = _allowed_keys(schema)
        problems = []
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
        expected = _expected_types(error.validator_value)
        return [smap.problem(path, f"expected {expected}, found {_describe(value)}", f"write {expected}" + (f" — {hint}" if hint else ""))]
    if kind == "enum":
        options = [str(o) for o in error.validator_value]
        guess = _suggest(str(value), options)
        fix = (guess + " " if guess else "") + f"use one of: {', '.join(options)}"
        return [smap.problem(path, f"{_describe(value)} is not allowed", fix)]
    if kind == "const":
        return [smap.problem(path, f"expected {error.validator_value!r}, found {_describe(value)}", hint)]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than", "exclusiveMaximum": "less than"}
        bounds = []
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key in schema:
                bounds.append(f"{words[key]} {schema[key]}")
        expect = " and ".join(bounds)
        return [smap.problem(path, f"{_describe(value)} is out of range: must be {expect}", f"use a value {expect}" + (f" — {hint}" if hint else ""))]
    if kind == "pattern":
        return [smap.problem(path, f"{_describe(value)} does not have the expected form ({error.validator_value})", hint)]
    if kind in ("minLength", "minItems"):
        return [smap.problem(path, "must not be empty", hint)]
    if kind == "propertyNames":
        bad = error.instance
        return [smap.problem(path + (bad,) if isinstance(bad, str) else path, f"name {_describe(bad)} is not allowed", "use letters, digits, '_', '.' and '-', starting with a letter or digit", prefer_key=True)]
    if kind in ("anyOf", "oneOf") and error.context:
        # Report the branch that matches the value's own type: that is what the user meant to write.
        # A branch whose root type differs from the value is not what the user meant; report the rest.
        relevant = [sub for sub in error.context if sub.relative_path or sub.validator not in ("type", "const")]
        if not relevant:
            types = [sub.validator_value for sub in error.context if sub.validator == "type"]
            flat = [t for ts in types for t in ([ts] if isinstance(ts, str) else ts)]
            consts = [repr(sub.validator_value) for sub in error.context if sub.validator == "const"]
            expected = " or ".join(consts + ([_expected_types(flat)] if flat else []))
            return [smap.problem(path, f"expected {expected}, found {_describe(value)}", hint)]
        problems: list[Problem] = []
        for sub in relevant:
            problems.extend(_explain(sub, smap))
        return problems
    return [smap.problem(path, error.message, hint)]


def schema_problems(data: Any, smap: SourceMap, schema_name: str = "inventory") -> list[Problem]:
    """Every schema violation in `data`, in document order."""
    validator = jsonschema.Draft202012Validator(load_schema(schema_name))
    problems: list[Problem] = []
    for error in validator.iter_errors(data):
        problems.extend(_explain(error, smap))
    unique = {(p.line, p.column, p.path, p.message): p for p in problems}
    return sorted(unique.values(), key=lambda p: (p.line or 0, p.column or 0, p.path))
