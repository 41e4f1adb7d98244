"""An HTML page read back as a browser's parser reads it (html.parser), for the readiness
report's tests: its tags and attributes, its tables cell by cell, and the verdict's text."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Table:
    """A table's class and its rows, each cell as (class, text, tooltip)."""

    css: str
    rows: list[list[tuple[str, str, str]]] = field(default_factory=list)  # (class, text, title) per cell

    def row(self, head: str) -> list[tuple[str, str, str]]:
        return next(row for row in self.rows if row[0][1] == head)


class Page(HTMLParser):
    """A page as a browser's parser reads it: every tag with its attributes, the tables' cells,
    and the text of the verdict (the div of class verdict)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: list[Table] = []
        self.verdict = ""
        self._cell: list[str] | None = None
        self._verdict_depth = 0
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "table":
            self.tables.append(Table(attributes.get("class") or ""))
        elif tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        elif tag in ("td", "th"):
            self._cell = [attributes.get("class") or "", "", attributes.get("title") or ""]
        if tag == "div" and "verdict" in (attributes.get("class") or ""):
            self._verdict_depth = 1
        elif tag == "div" and self._verdict_depth:
            self._verdict_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1].rows[-1].append((self._cell[0], self._cell[1].strip(), self._cell[2]))
            self._cell = None
        if tag == "div" and self._verdict_depth:
            self._verdict_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[1] += data
        if self._verdict_depth:
            self.verdict += data

    def matrices(self, corner: str) -> list[Table]:
        return [t for t in self.tables if t.css == "matrix" and t.rows[0][0][1] == corner]
