"""Facts that are one shell test: true or false, never a failed host."""

from __future__ import annotations

from pyinfra.api import FactBase


def yes_if(condition: str) -> str:
    """A command printing `yes` when the shell condition holds, `no` otherwise (exit status 0)."""
    return f"if {condition}; then echo yes; else echo no; fi"


class YesNoFact(FactBase[bool]):
    """Base of the yes/no facts: subclasses write `command(...)` with yes_if()."""

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "yes"

    @staticmethod
    def default() -> bool:
        return False
