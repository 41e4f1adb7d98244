"""Find the JSON schemas shipped with rdmaprov (installed wheel or source checkout)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Load `schemas/<name>.schema.json`; the wheel carries them inside the package."""
    filename = f"{name}.schema.json"
    # One name per joinpath: Python 3.10's Traversable takes no more (a namespace package's refuses).
    packaged = resources.files("rdmaprov").joinpath("schemas").joinpath(filename)
    if packaged.is_file():
        return json.loads(packaged.read_text(encoding="utf-8"))
    checkout = Path(__file__).resolve().parents[2] / "schemas" / filename
    return json.loads(checkout.read_text(encoding="utf-8"))
