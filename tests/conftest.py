"""Shared fixtures: real SSH hosts in network namespaces, and a runner for the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def rdmaprov(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the real `rdmaprov` CLI as a user would."""
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "rdmaprov", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def rdmaprov_json(*args: str, timeout: int = 600) -> tuple[int, dict]:
    proc = rdmaprov(*args, "--json", timeout=timeout)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


@pytest.fixture(scope="session", autouse=True)
def counter_state(tmp_path_factory) -> Path:
    """Counter baselines (health/counters.py) of this test session's own, not the user's."""
    path = tmp_path_factory.mktemp("state")
    os.environ["RDMAPROV_STATE"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def artifact_store(tmp_path_factory) -> Path:
    """A control-machine artifact cache of this test session's own: builds start from nothing."""
    path = tmp_path_factory.mktemp("artifacts")
    os.environ["RDMAPROV_ARTIFACTS"] = str(path)
    return path


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("real SSH hosts need root (network and mount namespaces)")


@pytest.fixture(scope="session")
def ssh_farm():
    """Three real sshd hosts shared by the engine's end-to-end tests."""
    _need_root()
    from tests.support.sshhosts import SSHHostFarm

    farm = SSHHostFarm(3).start()
    try:
        yield farm
    finally:
        farm.stop()


# tools/test.sh runs the lab tests in two processes at once: the converge test saves node1 and
# node2 where LAB_SAVE says once it passed, and the lab_pair tests, which need only that pair as
# converged, run on a copy booted from that save (LAB_COPY) in a network namespace of its own.
LAB_SAVE, LAB_COPY = "RDMAPROV_TEST_LAB_SAVE", "RDMAPROV_TEST_LAB_COPY"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    save_to = os.environ.get(LAB_SAVE)
    if save_to and report.when == "call" and item.get_closest_marker("saves_pair"):
        item.funcargs["vm_lab"].save_pair(Path(save_to), report.passed)


@pytest.fixture(scope="session")
def vm_lab(tmp_path_factory):
    """Three SoftRoCE-capable QEMU VMs, booted once per test session through `rdmaprov lab up`:
    node1 and node2 are the cluster (`lab.inventory`), Debian 12; node3, Debian 13, waits to be
    bootstrapped into it, so that the cluster becomes a mixed-release one, as during an upgrade."""
    _need_root()
    from tests.support.lab import VM_LAB_RELEASES, TestLab

    attached = os.environ.get("RDMAPROV_TEST_LAB")
    if attached:  # a lab kept up between runs while working on lab tests (tests/support/keep_lab.py)
        yield TestLab.attach(Path(attached), "vm", 3, members=2)
        return
    copy_of = os.environ.get(LAB_COPY)
    if copy_of:
        # the lab_pair tests, run by tools/test.sh beside the others on a copy of the converged pair
        lab = TestLab.copy_of_pair(Path(copy_of), Path(copy_of).parent / "copy")
    else:
        lab = TestLab(tmp_path_factory.mktemp("vmlab"), "vm", 3, "v", members=2, release=VM_LAB_RELEASES).up()
    try:
        yield lab
    finally:
        lab.down()
