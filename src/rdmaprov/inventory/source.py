"""Read a YAML file once, safely, and remember where every key and value came from.

jsonschema reports paths inside the document; users need file:line:column. Instead of PyYAML's
composer (recursive, unbounded, and silent about duplicated keys) the parser's event stream is
turned into plain data here, in one pass with an explicit stack, so that hostile input cannot hurt:
the file's size, the nesting depth and the number of values aliases expand to are bounded; an
alias inside its own anchor, a mapping key that YAML reads as a number, boolean or null, a complex
key and an unknown tag are errors with a position and a fix, never a traceback or a hang.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from rdmaprov.errors import Problem, UserError
from rdmaprov.inventory.docpath import DocPath, format_path

if TYPE_CHECKING:
    from typing import TypeAlias

    from yaml._yaml import Mark as _CMark

    # Events carry libyaml's C marks when the C parser reads, PyYAML's own otherwise: the same fields.
    _Mark: TypeAlias = yaml.Mark | _CMark

# Limits of the loader (docs/inventory.md, "Limits of the loader"): far above any real inventory (10,000 hosts with
# their settings are about 2 MiB and 200,000 values), far below what hurts the control machine.
MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 1_000_000

_TOO_DEEP = (
    f"nested more than {MAX_DEPTH} levels deep",
    "an inventory needs fewer than 10 levels: check brackets and indentation",
)
# Limits of libyaml's own (newer releases stop nesting past 1,000 levels in the scanner, which reads
# a flow collection ahead of the events, so before the reader's own check): reported as the loader's
# limit, so the words a user gets do not depend on which PyYAML or libyaml is installed.
_PARSER_LIMITS = {"exceeded maximum nesting depth": _TOO_DEEP}

# libyaml's C parser where PyYAML has it (the wheels do): the same events, several times faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"
_VALUE = "tag:yaml.org,2002:value"
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


@dataclass
class SourceMap:
    """Positions (1-based line, column) of values and of mapping keys, by document path."""

    file: str
    values: dict[DocPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[DocPath, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: DocPath, prefer_key: bool = False) -> tuple[int | None, int | None]:
        """Position of `path`, or of its nearest ancestor that has one."""
        probe = tuple(path)
        while True:
            table = (self.keys, self.values) if prefer_key else (self.values, self.keys)
            for positions in table:
                if probe in positions:
                    return positions[probe]
            if not probe:
                return None, None
            probe = probe[:-1]

    def problem(self, path: DocPath, message: str, fix: str = "", prefer_key: bool = False) -> Problem:
        line, col = self.locate(path, prefer_key=prefer_key)
        return Problem(self.file, message, line, col, format_path(path), fix)


def _position(mark: _Mark) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def _start(event: yaml.Event) -> _Mark:
    """Where an event starts. The marks are optional only for events built by hand: PyYAML's
    parsers, Python and libyaml alike, mark every event they emit."""
    assert event.start_mark is not None, f"the YAML parser emitted {type(event).__name__} without a position"
    return event.start_mark


class _Merge:
    """A `<<` key: its mappings are merged into the enclosing mapping when that mapping ends."""


@dataclass(frozen=True)
class TaggedScalar:
    """A scalar with a tag the caller asked to keep (Ansible's `!vault`, `!unsafe`): its text, unread."""

    tag: str
    text: str


def _what_yaml_read(value: Any) -> str:
    if value is None:
        return "null (nothing)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    return f"{'an integer' if isinstance(value, int) else 'a ' + type(value).__name__} ({value!r})"


@dataclass
class _Frame:
    """A mapping or sequence being read: its data, where it is, and its progress."""

    path: DocPath
    data: dict[Any, Any] | list[Any]
    anchor: str | None
    weight: int = 1
    key: Any = None
    has_key: bool = False
    skip_value: bool = False
    merges: list[Any] = field(default_factory=list)
    key_lines: dict[Any, int] = field(default_factory=dict)


class _Reader:
    """Turns parser events into plain data and a SourceMap; collects problems (fatal ones raise)."""

    def __init__(self, name: str, keep_tags: frozenset[str] = frozenset()) -> None:
        self.smap = SourceMap(name)
        self.keep_tags = keep_tags
        self.problems: list[Problem] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.stack: list[_Frame] = []
        self.values = 0
        self.documents = 0
        self.root: Any = None

    def fatal(self, mark: _Mark | None, message: str, fix: str) -> UserError:
        line, col = _position(mark) if mark else (None, None)
        return UserError(Problem(self.smap.file, message, line, col, fix=fix))

    def problem(self, mark: _Mark, path: DocPath, message: str, fix: str) -> None:
        line, col = _position(mark)
        self.problems.append(Problem(self.smap.file, message, line, col, format_path(path), fix))

    def count(self, weight: int, mark: _Mark) -> None:
        self.values += weight
        if self.values > MAX_VALUES:
            raise self.fatal(
                mark,
                f"the document expands to more than {MAX_VALUES:,} values (aliases that repeat aliases?)",
                "write the inventory without nested aliases; anchors are meant for shared settings",
            )

    def child_path(self) -> DocPath | None:
        """The document path of the value about to start (None: it is a mapping key)."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.data, list):
            return top.path + (len(top.data),)
        return top.path + (top.key,) if top.has_key else None

    def start(self, event: yaml.CollectionStartEvent, data: dict[Any, Any] | list[Any]) -> None:
        mark = _start(event)
        path = self.child_path()
        if path is None:  # a complex key (`? [a, b]`): reported when it ends
            path = self.stack[-1].path + ("?",)
        if len(self.stack) >= MAX_DEPTH:
            raise self.fatal(mark, *_TOO_DEEP)
        if event.tag not in _COLLECTION_TAGS:
            self.problem(
                mark,
                path,
                f"unsupported YAML tag {event.tag}",
                "remove the tag: inventories use plain mappings and lists",
            )
        self.smap.values[path] = _position(mark)
        self.count(1, mark)
        self.stack.append(_Frame(path, data, event.anchor))

    def end(self, mark: _Mark) -> None:
        frame = self.stack.pop()
        if isinstance(frame.data, dict) and frame.merges:
            merged: dict[Any, Any] = {}
            for source in frame.merges:
                for key, value in source.items():
                    merged.setdefault(key, value)
            merged.update(frame.data)
            frame.data = merged
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (frame.data, frame.weight)
        self.add(frame.data, frame.weight, mark)

    def scalar(self, event: yaml.ScalarEvent) -> None:
        mark = _start(event)
        tag = event.tag
        if tag is None or tag == "!":
            tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag in self.keep_tags:
            value: Any = TaggedScalar(tag, event.value)
        elif tag == _STR:
            value = event.value  # most scalars: no constructor needed
        elif tag == _MERGE:
            value = _Merge()
        elif tag == _VALUE:
            value = event.value
        else:
            construct = _CONSTRUCTOR.yaml_constructors.get(tag)
            if construct is None:
                at = self.child_path() or (self.stack[-1].path if self.stack else ())
                self.problem(
                    mark,
                    at,
                    f"unsupported YAML tag {tag}",
                    "remove the tag: inventories use plain strings, numbers and booleans",
                )
                value = event.value
            else:
                # typeshed's Node takes PyYAML's Python Mark only; PyYAML's own C composer gives it the
                # C marks, which have the same fields (a constructor's error message prints them).
                node = yaml.ScalarNode(
                    tag, event.value, cast("yaml.Mark", mark), cast("yaml.Mark | None", event.end_mark), event.style
                )
                try:
                    value = construct(_CONSTRUCTOR, node)
                except (yaml.YAMLError, ValueError, TypeError) as exc:
                    self.problem(
                        mark,
                        self.child_path() or (),
                        f"cannot read {event.value!r} as {tag}: {exc}",
                        "quote the value to keep it a string",
                    )
                    value = event.value
        path = self.child_path()
        if path is not None:
            self.smap.values[path] = _position(mark)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.count(1, mark)
        self.add(value, 1, mark, key_text=event.value)

    def alias(self, event: yaml.AliasEvent) -> None:
        mark = _start(event)
        if any(frame.anchor == event.anchor for frame in self.stack):
            raise self.fatal(
                mark,
                f"alias *{event.anchor} refers to a value that contains it (a loop)",
                f"an alias can only repeat a value that is complete before it: move *{event.anchor} out of "
                f"&{event.anchor}",
            )
        if event.anchor not in self.anchors:
            raise self.fatal(
                mark,
                f"alias *{event.anchor} has no anchor &{event.anchor} before it",
                f"define &{event.anchor} first, or fix the name",
            )
        value, weight = self.anchors[event.anchor]
        self.count(weight, mark)
        path = self.child_path()
        if path is not None:
            self.smap.values[path] = _position(mark)
        self.add(value, weight, mark)

    def add(self, value: Any, weight: int, mark: _Mark, key_text: str = "") -> None:
        """Put a finished value into the collection being read (or make it the document)."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        top.weight += weight
        if isinstance(top.data, list):
            top.data.append(value)
        elif not top.has_key:
            self.key(top, value, mark, key_text or repr(value))
        else:
            top.has_key = False
            if top.skip_value:
                return
            if isinstance(top.key, _Merge):
                self.merge(top, value, mark)
            else:
                top.data[top.key] = value

    def key(self, top: _Frame, value: Any, mark: _Mark, text: str) -> None:
        top.has_key, top.key, top.skip_value = True, value, False
        if isinstance(value, _Merge):
            return
        if isinstance(value, (dict, list)):
            self.problem(
                mark,
                top.path,
                "a mapping key must be a plain name, not a list or mapping",
                "write the key as a name (YAML's `? [a, b]` complex keys are not used by inventories)",
            )
            top.key, top.skip_value = "?", True
            return
        if not isinstance(value, str):
            self.problem(
                mark,
                top.path + (text,),
                f"key {text} is read by YAML as {_what_yaml_read(value)}, not as a name",
                f"quote it: '{text}'",
            )
            top.key, top.skip_value = text, True
            return
        if value in top.key_lines:
            self.problem(
                mark,
                top.path + (value,),
                f"duplicated key {value!r} (first defined on line {top.key_lines[value]})",
                "keep one definition; YAML would silently use only the last",
            )
            top.skip_value = True
            return
        top.key_lines[value] = mark.line + 1
        self.smap.keys[top.path + (value,)] = _position(mark)

    def merge(self, top: _Frame, value: Any, mark: _Mark) -> None:
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            self.problem(
                mark,
                top.path + ("<<",),
                "a merge key (<<) takes a mapping or a list of mappings",
                "merge an alias of a mapping: `<<: *defaults`",
            )
            return
        top.merges.extend(sources)

    def document(self, mark: _Mark) -> None:
        self.documents += 1
        if self.documents > 1:
            raise self.fatal(mark, "more than one YAML document (a second `---`)", "keep one inventory per file")


def read_text(path: Path) -> str:
    """The file's text, refusing what is not a regular file (a FIFO would block) or too large."""
    name = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(
            Problem(name, "file not found", fix="check the path; inventories usually live in inventories/")
        ) from None
    except OSError as exc:
        raise UserError(Problem(name, f"cannot read: {exc.strerror}", fix="make the file readable")) from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(Problem(name, "is a directory, not an inventory file", fix="pass a .yaml file"))
    if not stat.S_ISREG(info.st_mode):
        raise UserError(
            Problem(name, "is not a regular file (a pipe or a device?)", fix="pass the inventory as a file")
        )
    if info.st_size > MAX_BYTES:
        raise UserError(
            Problem(
                name,
                f"is {info.st_size:,} bytes, more than the {MAX_BYTES:,} an inventory may have",
                fix="split the cluster into several inventories, or check that this is the right file",
            )
        )
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(Problem(name, f"cannot read: {exc}", fix="make the file readable UTF-8 text")) from None


def parse_yaml(text: str, name: str, keep_tags: frozenset[str] = frozenset()) -> tuple[Any, SourceMap, list[Problem]]:
    """Plain data, positions, and the problems found in YAML that could still be read (a key
    that is not a name, a duplicated key, a tag: the rest of the document is checked too, so
    every problem is reported at once). YAML that cannot be read raises UserError.

    Scalars tagged with one of `keep_tags` become TaggedScalar instead of a problem: files of other
    tools (Ansible's vars files) use tags of their own that an importer must recognize, not refuse."""
    reader = _Reader(name, keep_tags)
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.ScalarEvent):
                reader.scalar(event)
            elif isinstance(event, yaml.AliasEvent):
                reader.alias(event)
            elif isinstance(event, yaml.MappingStartEvent):
                reader.start(event, {})
            elif isinstance(event, yaml.SequenceStartEvent):
                reader.start(event, [])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                reader.end(_start(event))
            elif isinstance(event, yaml.DocumentStartEvent):
                reader.document(_start(event))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = _position(mark) if mark else (None, None)
        what = exc.problem or exc.context or "invalid YAML"
        message, fix = _PARSER_LIMITS.get(
            what, (f"invalid YAML: {what}", "correct the YAML syntax at that position (indentation, quotes, colons)")
        )
        raise UserError(Problem(name, message, line, col, fix=fix)) from None
    except yaml.YAMLError as exc:
        raise UserError(Problem(name, f"invalid YAML: {exc}", fix="correct the YAML syntax")) from None
    return reader.root, reader.smap, reader.problems
