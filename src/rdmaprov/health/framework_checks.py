"""The NCCL a training job really runs: for each Python interpreter the inventory names
(`nccl.frameworks`), the NCCL its PyTorch loads against the one the gates verified, and on
eRDMA nodes with AIACC declared whether NCCL's net plugin loads from that environment.

A PyTorch wheel brings its own NCCL (nvidia-nccl-cu12) and loads it before the system's: every
gate can pass on the NCCL rdmaprov built while the job runs another, older or without the
fixes the cluster needs. Nothing is changed here: rdmaprov does not manage the site's Python
environments, it says what they load.
"""

from __future__ import annotations

from rdmaprov.health.findings import Checker
from rdmaprov.health.gpu_checks import declared_nccl
from rdmaprov.inventory.config import NodeConfig
from rdmaprov.parsers.framework import FrameworkNccl
from rdmaprov.parsers.node import NodeReport

_CHECK = "nccl.framework"


def _loads(found: FrameworkNccl) -> str:
    where = ", ".join(found.libraries) or "linked into PyTorch"
    return f"PyTorch {found.torch} loads NCCL {found.nccl_version or 'of unknown version'} ({where})"


def check_frameworks(c: Checker, node: NodeConfig, report: NodeReport) -> None:
    """One finding per declared interpreter (and one for the net plugin where AIACC is declared)."""
    declared, _ = declared_nccl(node)
    verified = declared or report.nccl_version
    expected = f"NCCL {verified}, the one the gates verified" if verified else "an NCCL PyTorch can load"
    for python in node.nccl.frameworks:
        found = report.frameworks.get(python)
        if found is None:
            continue  # not read this run (an older node-check's report)
        if not found.present or found.error:
            c.check(
                python,
                _CHECK,
                False,
                expected,
                "no such interpreter" if not found.present else f"cannot tell: {found.error}",
                "fix nccl.frameworks: the Python interpreter of the jobs' environment, which imports torch",
            )
            continue
        c.check(
            python,
            _CHECK,
            not verified or found.nccl_version == verified,
            expected,
            _loads(found),
            f"jobs in this environment run another NCCL than the gates measured: preload the verified one "
            f"(LD_PRELOAD=<its libnccl.so.2>) in the jobs, or declare NCCL {found.nccl_version} (nccl.version), "
            "apply and run the gates again",
        )
        if node.fabric == "erdma" and node.erdma.aiacc_plugin:
            c.check(
                f"{python} net plugin",
                _CHECK,
                found.plugin is not None,
                "NCCL's net plugin (AIACC) loads in this environment",
                found.plugin or f"not loaded: {found.plugin_error}",
                "NCCL in this environment runs on its internal transports: make the plugin's directory known "
                "to the loader (ld.so.conf.d or the jobs' LD_LIBRARY_PATH)",
            )
