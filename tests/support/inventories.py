"""Write an inventory file for a test, and read back the problems rdmaprov reports for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path, require_files: bool = True) -> list[str]:
    """Every problem loading `path` reports, formatted as the CLI prints them (it must fail)."""
    with pytest.raises(UserError) as info:
        load_inventory(path, require_files=require_files)
    return [p.format() for p in info.value.problems]
