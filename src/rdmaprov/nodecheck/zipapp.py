"""Build the node-check zipapp shipped to nodes: the rdmaprov modules `node-check` imports (found by
importing its entry module in a bare interpreter, `python3 -I -S`, so that only the standard
library can satisfy the rest), the inventory schema (for its defaults), and app_main.py as its
__main__.py.

The archive is byte-for-byte reproducible (sorted entries, fixed timestamps and modes, stored
uncompressed): its sha256 changes only when its code does, so the deploy re-uploads it only then,
whichever control machine, timezone or zlib built it.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import rdmaprov
from rdmaprov.errors import UserError
from rdmaprov.schemas import load_schema

ENTRY = "rdmaprov.nodecheck.run"
# `python3 -I -S`: no environment, no site-packages, no user site: the node's bare interpreter.
INTERPRETER = "/usr/bin/python3 -IS"
_EPOCH = (1980, 1, 1, 0, 0, 0)
_PROBE = (
    "import sys; sys.path.insert(0, sys.argv[1]); import importlib; importlib.import_module(sys.argv[2]); "
    "print('\\n'.join(sorted(sys.modules)))"
)


def package_root() -> Path:
    """The directory that holds the `rdmaprov` package (src/ in a checkout, site-packages installed)."""
    return Path(rdmaprov.__file__).resolve().parent.parent


def imported_modules(entry: str = ENTRY) -> list[str]:
    """Every module importing `entry` loads, as a bare interpreter (-I -S) sees it; a UserError when
    something outside the standard library is imported (it would be missing on the node)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, str(package_root()), entry], capture_output=True, text=True
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"node-check cannot be packed: importing {entry} needs more than the standard library: {last}")
    modules = proc.stdout.split()
    foreign = [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names | {"rdmaprov", "__main__"}]
    if foreign:
        raise UserError(
            f"node-check cannot be packed: {entry} imports {', '.join(foreign)} (not in the standard library)"
        )
    return [m for m in modules if m == "rdmaprov" or m.startswith("rdmaprov.")]


def module_file(name: str) -> Path:
    """The source file of an rdmaprov module or package, by Python's own rule: a folder with an
    __init__.py is the package, a module file wins over a folder without one (the installed wheel
    has the data folder rdmaprov/schemas/ beside the module rdmaprov/schemas.py)."""
    path = package_root().joinpath(*name.split("."))
    package = path / "__init__.py"
    return package if package.is_file() else path.with_suffix(".py")


def _entry(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # Unix, wherever it is built
    return info, data


def archive_entries() -> list[tuple[zipfile.ZipInfo, bytes]]:
    """(entry, bytes) of everything in the archive, sorted by name."""
    root = package_root()
    files: dict[str, bytes] = {"__main__.py": (Path(__file__).parent / "app_main.py").read_bytes()}
    for module in imported_modules():
        path = module_file(module)
        source = path.read_bytes()
        ast.parse(source, str(path))  # a file that is not Python source must not reach a node
        files[path.relative_to(root).as_posix()] = source
    # Found where it lives (a checkout's schemas/, a wheel's package), packed where the wheel has it.
    schema = json.dumps(load_schema("inventory"), indent=1, sort_keys=True)
    files["rdmaprov/schemas/inventory.schema.json"] = schema.encode()
    return [_entry(name, files[name]) for name in sorted(files)]


@cache
def build() -> bytes:
    """The zipapp's bytes: `#!` line, then the zip."""
    buffer = io.BytesIO()
    buffer.write(f"#!{INTERPRETER}\n".encode())
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, data in archive_entries():
            archive.writestr(info, data)
    return buffer.getvalue()


def sha256() -> str:
    return hashlib.sha256(build()).hexdigest()
