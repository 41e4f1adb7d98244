"""DCGM's active diagnostic (`dcgmi diag`), judged per GPU: the check every GPU health tool in the
field runs before a node is trusted with a job (memory, PCIe, power, compute), at level 1 in
verify and level 3 in `verify --deep`."""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.parsers.dcgm import DiagTest
from rdmaprov.parsers.node import NodeReport

_WHOLE = "DCGM diagnostic"


def check_dcgm(c: Checker, report: NodeReport) -> None:
    """Every failed test a finding on its GPU; one passing finding when none failed; unknown,
    with the reason, when the diagnostic gave no results (no DCGM, no host engine, stopped)."""
    result = report.dcgm
    if result is None:  # not asked for (node-check, facts)
        return
    expected = "every test passes"
    if result.unknown is not None:
        c.unknown(_WHOLE, "gpu.dcgm_diag", expected, result.unknown)
        return
    failed = result.failed()
    for test in failed:
        c.check(_subject(test), "gpu.dcgm_diag", False, "pass", test.message or "failed, no message", _hint(test))
    if not failed:
        passed, warned = result.by_status("pass"), result.by_status("warn")
        others = len(result.tests) - len(passed) - len(warned)  # skipped, not run: neither pass nor fail
        c.check(
            _WHOLE,
            "gpu.dcgm_diag",
            True,
            expected,
            f"{len(passed)} results passed"
            + (f", {others} skipped or not run" if others else "")
            + (f" (DCGM {result.version})" if result.version else "")
            + (f", warnings: {'; '.join(_subject(t) + ': ' + t.message for t in warned)}" if warned else ""),
        )


def _subject(test: DiagTest) -> str:
    where = f"gpu{test.gpu}" if test.gpu is not None else test.entity or "node"
    return f"{where} {test.category}/{test.name}"


# DCGM's checks of the node's software and setup (its Deployment category and the `software`
# plugin), as against the tests that exercise the GPU's hardware.
_SOFTWARE = ("Deployment",)


def _hint(test: DiagTest) -> str:
    if test.category in _SOFTWARE or test.name.lower() == "software":
        return f"DCGM's {test.name} check of the node's software failed: fix what its message names, then verify again"
    return (
        f"DCGM's {test.name} test failed on this GPU: drain the node, reset the GPU (`nvidia-smi -r`) and run "
        "`rdmaprov verify --deep`; if it fails again, RMA the GPU"
    )
