"""What users install: the wheel carries every file the package has in the checkout (modules, the
gate probe's C source, the schemas) and packs the node-check zipapp; the lowest versions CI tests
are pyproject.toml's lower bounds. tools/test.sh runs this tier against the installed wheel."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import rdmaprov
from rdmaprov.nodecheck import zipapp
from tests.conftest import REPO

CHECKOUT = REPO / "src" / "rdmaprov"
INSTALLED = Path(rdmaprov.__file__).resolve().parent


def _installed_wheel() -> Path:
    if INSTALLED == CHECKOUT.resolve():
        pytest.skip("rdmaprov is imported from the checkout; tools/test.sh runs this against the installed wheel")
    return INSTALLED


def _files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_carries_every_file_of_the_package_as_it_is_in_the_checkout():
    installed = _files(_installed_wheel())
    checkout = _files(CHECKOUT)
    assert "health/gates/probe/allreduce_probe.c" in checkout
    missing = sorted(set(checkout) - set(installed))
    assert not missing, f"the wheel lacks {missing}"
    differ = sorted(name for name, data in checkout.items() if installed[name] != data)
    assert not differ, f"the wheel's copies differ from the checkout's: {differ}"


def test_the_wheel_carries_the_schemas_beside_the_module_that_loads_them():
    installed = _installed_wheel()
    for schema in sorted((REPO / "schemas").glob("*.schema.json")):
        packaged = installed / "schemas" / schema.name
        assert packaged.is_file(), f"the wheel lacks schemas/{schema.name}"
        assert json.loads(packaged.read_text()) == json.loads(schema.read_text())
    assert (installed / "schemas.py").is_file() and not (installed / "schemas" / "__init__.py").exists()


def test_the_node_check_zipapp_is_packed_from_the_installed_package():
    """The wheel has a folder rdmaprov/schemas/ beside the module rdmaprov/schemas.py: the packer
    must take the module (it once opened rdmaprov/schemas/__init__.py and failed)."""
    _installed_wheel()
    archive = zipfile.ZipFile(io.BytesIO(zipapp.build()))
    names = set(archive.namelist())
    assert {"__main__.py", "rdmaprov/schemas.py", "rdmaprov/schemas/inventory.schema.json"} <= names
    assert archive.read("rdmaprov/schemas.py") == (INSTALLED / "schemas.py").read_bytes()


def test_the_lowest_versions_tested_are_pyproject_lower_bounds():
    """constraints/lowest.txt pins each dependency at the lower bound of its range, so the unit tier
    run with it (tools/test.sh) proves the ranges' lower ends; a bound raised or added without it fails."""
    lowest_file = REPO / "constraints" / "lowest.txt"
    if not lowest_file.is_file():
        pytest.skip("no constraints/ beside the tests")
    pins = {}
    for line in lowest_file.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            pins[_normal(requirement.name)] = str(requirement.specifier).removeprefix("==")
    bounds = {}
    for text in importlib.metadata.requires("rdmaprov") or []:
        requirement = Requirement(text)
        if requirement.marker is None:
            lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
            assert lower, f"{requirement} has no lower bound to test"
            bounds[_normal(requirement.name)] = lower[0]
    assert {name: _release(version) for name, version in pins.items()} == {
        name: _release(version) for name, version in bounds.items()
    }


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def _release(version: str) -> tuple[int, ...]:
    """6 and 6.0.0 are one version."""
    parts = [int(part) for part in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_the_tests_run_against_the_package_they_were_asked_to():
    if os.environ.get("RDMAPROV_TEST_INSTALLED"):
        assert INSTALLED != CHECKOUT.resolve(), "RDMAPROV_TEST_INSTALLED is set but rdmaprov comes from src/"
    else:
        pytest.skip("the installed wheel is tested by tools/test.sh (RDMAPROV_TEST_INSTALLED=1)")
