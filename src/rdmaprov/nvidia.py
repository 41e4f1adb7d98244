"""What rdmaprov knows about NVIDIA's stack: GPU architectures, CUDA/driver pairing, repositories.

Pure tables and functions (no I/O), shared by inventory validation, the GPU and NCCL deploys and
their tests. Figures are from NVIDIA's CUDA release notes and compatibility guide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rdmaprov.parsers.system import OsInfo

# Architecture → (first CUDA that compiles for it, first CUDA major that no longer does).
ARCHS: dict[str, tuple[tuple[int, int], int | None]] = {
    "sm_35": ((5, 0), 12),
    "sm_37": ((6, 5), 12),
    "sm_50": ((6, 0), 13),
    "sm_52": ((6, 5), 13),
    "sm_53": ((6, 5), 13),
    "sm_60": ((8, 0), 13),
    "sm_61": ((8, 0), 13),
    "sm_62": ((8, 0), 13),
    "sm_70": ((9, 0), 13),
    "sm_72": ((10, 0), 13),
    "sm_75": ((10, 0), None),
    "sm_80": ((11, 0), None),
    "sm_86": ((11, 1), None),
    "sm_87": ((11, 4), None),
    "sm_89": ((11, 8), None),
    "sm_90": ((11, 8), None),
    "sm_90a": ((12, 0), None),
    "sm_100": ((12, 8), None),
    "sm_100a": ((12, 8), None),
    "sm_103": ((12, 9), None),
    "sm_120": ((12, 8), None),
    "sm_121": ((12, 9), None),
}

# Minor-version compatibility: the oldest driver that runs anything built with a CUDA major.
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos"
# Signing keys of NVIDIA's CUDA repositories (rotated in 2022).
REPO_KEY = {"debian": "3bf863cc.pub", "rhel": "D42D0685.pub"}


def parse_version(text: str) -> tuple[int, ...]:
    """'535.129.03' → (535, 129, 3); '12.2' → (12, 2)."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


def arch_from_compute_cap(cap: str) -> str:
    """nvidia-smi's compute_cap ('8.0', '9.0') → 'sm_80'."""
    major, _, minor = cap.strip().partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"


def gencode(arch: str) -> str:
    """NVCC_GENCODE for one architecture: SASS for it (sm_90a keeps its suffix)."""
    number = arch[len("sm_") :]
    return f"-gencode=arch=compute_{number},code=sm_{number}"


def arch_problem(arch: str, cuda: str | None) -> str | None:
    """Why `arch` cannot be built with CUDA `cuda` (None: it can, or nothing to judge)."""
    if arch not in ARCHS:
        return f"unknown GPU architecture {arch} (known: {', '.join(ARCHS)})"
    if not cuda:
        return None
    first, dropped = ARCHS[arch]
    version = parse_version(cuda)[:2]
    if version < first:
        return f"{arch} needs CUDA {first[0]}.{first[1]} or newer, not {cuda}"
    if dropped is not None and version[0] >= dropped:
        return f"CUDA {dropped}.0 and newer no longer build for {arch}; use CUDA {dropped - 1}.x"
    return None


def driver_problem(driver: str, cuda: str) -> str | None:
    """Why driver `driver` (branch '535' or exact '535.129.03') cannot run CUDA `cuda`."""
    major = parse_version(cuda)[0]
    floor = MIN_DRIVER.get(major)
    if floor is None:
        return f"CUDA {cuda} is not a CUDA rdmaprov knows (11.x, 12.x, 13.x)"
    version = parse_version(driver)
    # A branch ('525') is judged by its newest releases: any 525.x at or above the floor will do.
    fits = version[0] > floor[0] or (version[0] == floor[0] and (len(version) == 1 or version >= floor))
    if fits:
        return None
    return (
        f"driver {driver} cannot run CUDA {cuda}: CUDA {major}.x needs driver {'.'.join(str(p) for p in floor)} or "
        "newer"
    )


def driver_matches(wanted: str, installed: str) -> bool:
    """Whether an installed driver version satisfies the declared branch or exact version."""
    if not installed:
        return False
    return installed == wanted or ("." not in wanted and installed.split(".")[0] == wanted)


@dataclass(frozen=True)
class CudaRepo:
    """NVIDIA's CUDA repository for one distro release: where it is and how the node names it."""

    distro: str  # ubuntu2204, rhel9, debian12…
    url: str
    key_url: str


def cuda_repo(os_info: OsInfo, base: str | None = None) -> CudaRepo:
    """The CUDA repository for this node's distro (Alibaba Cloud Linux 3 uses RHEL 8's)."""
    if os_info.id == "ubuntu":
        distro = "ubuntu" + os_info.version_id.replace(".", "")
    elif os_info.id == "debian":
        distro = f"debian{os_info.major}"
    elif os_info.family == "rhel":
        distro = "rhel8" if os_info.id == "alinux" and os_info.major == "3" else f"rhel{os_info.major}"
    else:
        raise ValueError(
            f"no NVIDIA CUDA repository for {os_info.pretty_name}: set gpu.repo to a mirror that has one, or install "
            "the driver yourself and leave gpu.driver_version unset"
        )
    # parse_os_release puts ubuntu and debian in the debian family; the branch above checked rhel.
    assert os_info.family is not None, f"{os_info.pretty_name} has no package family but passed as {distro}"
    url = f"{(base or CUDA_REPO).rstrip('/')}/{distro}/x86_64"
    return CudaRepo(distro, url, f"{url}/{REPO_KEY[os_info.family]}")


def toolkit_package(cuda: str) -> str:
    """'12.2' → 'cuda-toolkit-12-2' (the same name in the apt and yum repositories)."""
    return "cuda-toolkit-" + cuda.replace(".", "-")


def cuda_home(cuda: str) -> str:
    return f"/usr/local/cuda-{cuda}"


# Kernel module flavors. NVIDIA's open modules run Turing (sm_75) and newer; Blackwell (sm_100)
# runs only those; from driver 560 they are NVIDIA's default for every GPU that can run them.
# Older branches default to the proprietary modules, which older nodes already run.
OPEN_MODULES_FROM = 75
OPEN_MODULES_ONLY_FROM = 100
OPEN_MODULES_DEFAULT_BRANCH = 560


def arch_number(arch: str) -> int:
    """'sm_90a' → 90."""
    return int(re.sub(r"\D", "", arch))


def module_flavor(declared: str, archs: list[str], driver: str) -> str:
    """The kernel modules a node gets: `declared` (open, proprietary, auto) judged against its
    GPUs' architectures. Raises ValueError, saying what to set, for a pair that cannot run."""
    numbers = [arch_number(a) for a in archs]
    only_open = [a for a, n in zip(archs, numbers, strict=True) if n >= OPEN_MODULES_ONLY_FROM]
    no_open = [a for a, n in zip(archs, numbers, strict=True) if n < OPEN_MODULES_FROM]
    if only_open and no_open:
        raise ValueError(f"GPUs of {', '.join(only_open)} and {', '.join(no_open)} cannot share one driver")
    if declared == "proprietary" and only_open:
        raise ValueError(
            f"{only_open[0]} GPUs run only NVIDIA's open kernel modules: set gpu.kernel_modules to open or auto"
        )
    if declared == "open" and no_open:
        raise ValueError(
            f"{no_open[0]} GPUs cannot run NVIDIA's open kernel modules (Turing, sm_75, and newer only): set "
            "gpu.kernel_modules to proprietary or auto"
        )
    if declared != "auto":
        return declared
    newer_branch = parse_version(driver)[0] >= OPEN_MODULES_DEFAULT_BRANCH
    if not archs and newer_branch:
        raise ValueError(
            f"from driver {OPEN_MODULES_DEFAULT_BRANCH} the GPUs' architecture decides the kernel modules (Volta and "
            "older run only the proprietary ones), and it is not known before a driver runs: set gpu.arch (or "
            "gpu.kernel_modules)"
        )
    return "open" if only_open or (not no_open and newer_branch) else "proprietary"


def flavor_of_license(license_text: str) -> str:
    """`modinfo -F license nvidia`: "Dual MIT/GPL" for the open modules, "NVIDIA" for the
    proprietary ones; "" when no module is installed."""
    text = license_text.strip()
    if not text:
        return ""
    return "open" if "GPL" in text or "MIT" in text else "proprietary"


def cuda_major_of(driver: str) -> int | None:
    """The newest CUDA major a driver branch runs (535 → 12, 580 → 13); None below CUDA 11's."""
    branch = parse_version(driver)[0]
    runs = [major for major, floor in MIN_DRIVER.items() if branch >= floor[0]]
    return max(runs) if runs else None


def dcgm_package(driver: str) -> str:
    """DCGM for a driver branch: DCGM 4, built per CUDA major (`datacenter-gpu-manager-4-cuda12`),
    from CUDA 12's drivers on; DCGM 3 (`datacenter-gpu-manager`) before."""
    major = cuda_major_of(driver)
    return f"datacenter-gpu-manager-4-cuda{major}" if major and major >= 12 else "datacenter-gpu-manager"
