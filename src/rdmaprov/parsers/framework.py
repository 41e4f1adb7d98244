"""Which NCCL a training framework really loads, from the lines facts/node_report.py's
`frameworks` section prints: per declared Python interpreter, `python PATH`, then `missing` or
the probe's one JSON line (`rdmaprov-framework {...}`), or what the interpreter said instead.

PyTorch wheels bring their own NCCL (the nvidia-nccl-cu12 wheel, loaded from the environment's
site-packages) or link it into libtorch_cuda.so: a job in that environment runs that NCCL, not
the one rdmaprov built and the gates measured. The probe imports torch, asks it for its NCCL
version and reads /proc/self/maps for the libnccl file the process mapped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MARK = "rdmaprov-framework "


@dataclass(frozen=True)
class FrameworkNccl:
    """One interpreter's answer. `error`: why it could not say (no torch, the interpreter failed)."""

    python: str
    present: bool = True
    torch: str | None = None
    nccl_version: str | None = None
    libraries: tuple[str, ...] = ()  # the libnccl files mapped into the process; none: linked into torch
    plugin: str | None = None  # the NCCL net plugin file it loaded
    plugin_error: str | None = None  # the loader's words when it could not load one
    error: str | None = None


def nccl_version_text(value: object) -> str | None:
    """torch.cuda.nccl.version() as X.Y.Z: a tuple (2, 20, 5) in PyTorch 2, an int code in older
    ones (NCCL's own: 2708 for 2.7.8 below 2.9, 21803 for 2.18.3 from 2.9 on)."""
    if isinstance(value, list):
        return ".".join(str(part) for part in value)
    if isinstance(value, int):
        if value >= 10000:
            return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"
    return None


def _answer(python: str, said: list[str]) -> FrameworkNccl:
    for line in said:
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK) :])
            except json.JSONDecodeError:
                break
            return FrameworkNccl(
                python,
                torch=data.get("torch"),
                nccl_version=nccl_version_text(data.get("nccl")),
                libraries=tuple(data.get("libraries") or ()),
                plugin=data.get("plugin") or None,
                plugin_error=data.get("plugin_error"),
                error=data.get("error"),
            )
    last = next((line for line in reversed(said) if line.strip()), "no output")
    return FrameworkNccl(python, error=last.strip())


def parse_frameworks(lines: list[str]) -> dict[str, FrameworkNccl]:
    """Each declared interpreter's FrameworkNccl, by its path."""
    said: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("python "):
            current = line[len("python ") :].strip()
            said[current] = []
        elif current is not None:
            said[current].append(line)
    return {
        python: FrameworkNccl(python, present=False) if lines == ["missing"] else _answer(python, lines)
        for python, lines in said.items()
    }
