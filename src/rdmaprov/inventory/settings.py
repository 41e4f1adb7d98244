"""Inventory settings read with their types: one mapping of the YAML as the schema checked it.

The schema has already refused a value of the wrong type, so on a validated inventory these reads
never fail; they exist so that what a reader takes out of the YAML has a type that mypy checks the
typed model against, instead of `Any` flowing into it. A value of another type than the reader
asks for is rdmaprov's own bug (a schema and its reader out of step): the TypeError names the
setting. The semantic checks read written, not yet defaulted, settings the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from rdmaprov.inventory.docpath import DocPath, format_path


class Section:
    """One mapping of the settings and where it sits in the document (for the errors). Read
    only; a plain class with slots, as loading 10,000 hosts makes a few hundred thousand."""

    __slots__ = ("data", "where")

    def __init__(self, data: Mapping[str, object], where: DocPath = ()) -> None:
        self.data = data
        self.where = where

    @classmethod
    def of(cls, value: object, where: DocPath = ()) -> Section:
        """A mapping as a section; null or absent (None) as an empty one."""
        if type(value) is dict or isinstance(value, Mapping):
            return cls(value, where)
        if value is None:
            return cls({}, where)
        raise _wrong(where, "a mapping", value)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __bool__(self) -> bool:
        return bool(self.data)

    def get(self, key: str) -> object:
        """The value as written (None when absent), for checks that look at it before trusting it."""
        return self.data.get(key)

    def section(self, key: str) -> Section:
        return Section.of(self.data.get(key), (*self.where, key))

    def sections(self, key: str) -> list[Section]:
        """A list of mappings (an absent one as empty)."""
        return [Section.of(item, (*self.where, key, index)) for index, item in enumerate(self._list(key))]

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if isinstance(value, str):
            return value
        raise _wrong((*self.where, key), "a string", value)

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _wrong((*self.where, key), "an integer", value)

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        """An integer or a decimal, as written (an integer stays one: what it prints does not change)."""
        value = self.data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        raise _wrong((*self.where, key), "a number", value)

    def optional_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def flag(self, key: str) -> bool:
        value = self.data.get(key)
        if isinstance(value, bool):
            return value
        raise _wrong((*self.where, key), "true or false", value)

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings as a tuple (an absent or null one as empty)."""
        items = self._list(key)
        found = tuple(item for item in items if isinstance(item, str))
        if len(found) < len(items):
            index = next(i for i, item in enumerate(items) if not isinstance(item, str))
            raise _wrong((*self.where, key, index), "a string", items[index])
        return found

    def optional_texts(self, key: str) -> tuple[str, ...] | None:
        return None if self.data.get(key) is None else self.texts(key)

    def text_map(self, key: str) -> dict[str, str]:
        """A mapping of strings to strings (an absent one as empty)."""
        found = self.section(key)
        return {name: found.text(name) for name in found.data}

    def _list(self, key: str) -> list[object]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            raise _wrong((*self.where, key), "a list", value)
        return list(value)


def _wrong(where: DocPath, what: str, value: object) -> TypeError:
    return TypeError(f"{format_path(where) or 'the settings'}: rdmaprov reads {what} there, not {type(value).__name__}")
