"""The engine: pyinfra through its Python API, planned in parallel, with typed per-host results."""

from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.results import HostResult, OpResult, RunResult
from rdmaprov.engine.runner import RunOptions, run

__all__ = ["HostResult", "NodeContext", "OpResult", "RunOptions", "RunResult", "run"]
