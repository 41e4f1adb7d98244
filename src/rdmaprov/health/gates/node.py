"""Gate: each node alone, all nodes at once: all_reduce_perf over the node's own GPUs (one process,
`-g N`), so a single 8-GPU server, or one bad node of many, gets a verdict of its own.

The intra-node figure is NVLink's, not the NIC's: the threshold is the inventory's
`gates.node.min_busbw_gbs`, else a default for 8 SXM GPUs of a known model, the figures Azure's
node health checks hold ND-series nodes to (AzNHC: H100 ≥ 460 GB/s, H200 ≥ 480, A100 ≥ 228).
A node with fewer than two GPUs has nothing to reduce across: it is skipped, never failed.
"""

from __future__ import annotations

from dataclasses import replace

from rdmaprov.engine.session import Session
from rdmaprov.health.gates.all_reduce import judge_run
from rdmaprov.health.gates.bandwidth import Bounds, Verdict, failed
from rdmaprov.health.gates.launch import launcher
from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.gates.subject import Subject
from rdmaprov.inventory.gates import NodeGate
from rdmaprov.parsers.nccl_tests import parse_nccl_tests
from rdmaprov.parsers.node import Gpu, NodeReport
from rdmaprov.quoting import sh_join

# busbw in GB/s for 8 GPUs of the model (SXM: the PCIe cards have no NVLink mesh).
DEFAULT_BUSBW_8GPU = {"H200": 480.0, "H100": 460.0, "A100": 228.0}


def default_threshold(gpus: list[Gpu]) -> tuple[float, str] | None:
    """(busbw, why) for a node of 8 SXM GPUs of one known model; None where there is no default."""
    names = {gpu.name for gpu in gpus}
    if len(gpus) != 8 or len(names) != 1:
        return None
    name = names.pop()
    if "PCIe" in name or "NVL" in name:
        return None
    model = next((m for m in DEFAULT_BUSBW_8GPU if m in name), None)
    if model is None:
        return None
    return DEFAULT_BUSBW_8GPU[model], f"the default for 8 {model} SXM GPUs"


def node_command(binary: str, env: dict[str, str], gpus: int, settings: NodeGate) -> str:
    """all_reduce_perf over `gpus` GPUs in one process, with the node's NCCL environment."""
    words = [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        binary,
        "-b",
        settings.min_bytes,
        "-e",
        settings.max_bytes,
        "-f",
        "2",
        "-g",
        str(gpus),
        "-c",
        "1",
        "-o",
        "sum",
    ]
    return sh_join(words)


def judge_node(output: str, ok: bool, gpus: list[Gpu], settings: NodeGate) -> Verdict:
    """The verdict on one node's run: complete and correct (as the cluster gate), busbw at the
    largest size against the inventory's threshold or the model's default."""
    if settings.min_busbw_gbs is not None:
        minimum, source = settings.min_busbw_gbs, "gates.node.min_busbw_gbs"
    elif (default := default_threshold(gpus)) is not None:
        minimum, source = default
    else:
        model = ", ".join(sorted({g.name for g in gpus}))
        return failed(f"no threshold for {len(gpus)} × {model}: set gates.node.min_busbw_gbs", "GB/s")
    # The cluster gate's checks of a complete, correct run, held to an absolute minimum.
    verdict = judge_run(parse_nccl_tests(output), Bounds(0.9, 0.92, 1.05, minimum, source), None)
    if verdict.passed and not ok:
        return replace(verdict, status="fail", reason=f"all_reduce_perf exited with an error: {verdict.reason}")
    return verdict


def run_node_gate(session: Session, hosts: list[str], reports: dict[str, NodeReport]) -> list[GateResult]:
    """One verdict per node: every node with two or more GPUs runs at once."""
    settings = session.inventory.gates.node
    results: dict[str, GateResult] = {}
    runnable = []
    for name in hosts:
        report = reports.get(name)
        if name in session.unreachable or report is None:
            results[name] = GateResult("node", Subject.node(name), False, "not reachable or not readable")
        elif len(report.gpus) < 2:
            found = "no GPU" if not report.gpus else "one GPU"
            results[name] = GateResult(
                "node", Subject.node(name), True, f"skipped ({found}: nothing to reduce across)", status="skipped"
            )
        else:
            runnable.append(name)

    def run(name: str) -> GateResult:
        node = session.inventory.hosts[name].node
        env, _ = node.nccl_environment()
        gpus = reports[name].gpus
        # nccl-tests built with MPI=1 load the site MPI's libmpi (no RUNPATH to it)
        command = node.mpi.site_env + node_command(node.nccl.all_reduce_perf, env, len(gpus), settings)
        result = launch.run(name, command, settings.timeout_s, gpus=len(gpus))
        verdict = judge_node(result.stdout, result.ok, gpus, settings)
        return GateResult.of(
            "node", Subject.node(name), verdict, details={"command": command, "gpus": len(gpus), "via": launch.via}
        )

    launch = launcher(session)

    done = session.each(runnable, run)
    for name, outcome in done.items():
        results[name] = (
            outcome if isinstance(outcome, GateResult) else GateResult.broken("node", Subject.node(name), outcome)
        )
    return [results[name] for name in hosts if name in results]
