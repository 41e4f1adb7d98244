"""Read a YAML file and remember where every key and value came from.

jsonschema reports paths inside the document; users need file:line:column. We compose the YAML
node tree once to record positions (and to catch duplicated keys, which PyYAML silently drops),
then construct the plain data with the safe loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rdmaprov.errors import Problem, UserError

DocPath = tuple[str | int, ...]


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


def format_path(path: DocPath) -> str:
    """Dotted path as users write it: groups.gpu.hosts.gpu3.ssh.port, packages.extra[2]."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _walk(node: yaml.Node, path: DocPath, smap: SourceMap, problems: list[Problem]) -> None:
    smap.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = key_node.value
            if key in seen:
                first = seen[key].start_mark.line + 1
                problems.append(
                    Problem(
                        smap.file,
                        f"duplicated key {key!r} (first defined on line {first})",
                        key_node.start_mark.line + 1,
                        key_node.start_mark.column + 1,
                        format_path(path + (key,)),
                        "keep one definition; YAML would silently use only the last",
                    )
                )
                continue
            seen[key] = key_node
            smap.keys[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, path + (key,), smap, problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, path + (index,), smap, problems)


def load_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Load `path`, returning (data, source map); raises UserError for anything unreadable."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(Problem(name, "file not found", fix="check the path; inventories usually live in inventories/"))
    except IsADirectoryError:
        raise UserError(Problem(name, "is a directory, not an inventory file", fix="pass a .yaml file"))
    except (PermissionError, UnicodeDecodeError) as exc:
        raise UserError(Problem(name, f"cannot read: {exc}", fix="make the file readable UTF-8 text"))

    smap = SourceMap(name)
    problems: list[Problem] = []
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _walk(node, (), smap, problems)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        what = exc.problem or exc.context or "invalid YAML"
        raise UserError(Problem(name, f"invalid YAML: {what}", line, col, fix="correct the YAML syntax at that position (indentation, quotes, colons)"))
    except yaml.YAMLError as exc:
        raise UserError(Problem(name, f"invalid YAML: {exc}", fix="correct the YAML syntax"))
    if problems:
        raise UserError(problems)
    return data, smap
