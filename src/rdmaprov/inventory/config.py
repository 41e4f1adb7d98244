"""The inventory's meaning, typed: what one node is asked to be (a host's merged, defaulted
settings as frozen objects) and what follows from them alone (NCCL environment, GID index, wanted
MTUs, MPI prefix), and SSH trust between the nodes (the gates: gates.py; Slurm: slurm.py).

The loader builds one `NodeConfig` per distinct merged settings (hosts of one group share it);
deploys, health checks, gates and `validate` all read it, so a setting means the same thing
everywhere and a derivation that refuses a setting (a `ValueError`) is found by `validate`
before anything connects. Defaults come from the schema (fill_defaults ran first): a key with a
default is read as present, so no default is restated here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from rdmaprov.inventory.containers import ContainerConfig
from rdmaprov.inventory.roce_qos import RoceQos
from rdmaprov.inventory.settings import Section
from rdmaprov.quoting import sh

# What each fabric needs when the inventory says nothing (field manuals; docs/inventory.md,
# "What each deploy does", `nccl_env`).
_FABRIC_HCA = {"erdma": "erdma", "softroce": "rxe"}
_FABRIC_GID_INDEX = {"roce": 3, "erdma": 1, "softroce": 1}
ETHERNET_FABRICS = frozenset({"roce", "erdma", "softroce"})
# The fabrics whose HCAs can read and write GPU memory directly (GPUDirect RDMA).
GPUDIRECT_FABRICS = frozenset({"infiniband", "roce"})


def rxe_links(netdevs: list[str]) -> list[tuple[str, str]]:
    """SoftRoCE's links as rdmaprov makes them, (rxe device, netdev): rxe0 on the first netdev,
    rxe1 on the second…"""
    return [(f"rxe{index}", netdev) for index, netdev in enumerate(netdevs)]


def spec_matches(spec: str, device: str) -> bool:
    """NCCL_IB_HCA semantics: '=name' is exact, otherwise a prefix; ':port' suffixes are ignored."""
    name = spec.split(":", 1)[0]
    if name.startswith("="):
        return device == name[1:]
    return device.startswith(name)


def hca_specs(hca: str) -> list[str]:
    """'=a,b' → ['=a', '=b'] (a leading '=' makes every entry exact); 'mlx5' → ['mlx5']."""
    exact = hca.startswith("=")
    return [("=" + s if exact else s) for s in hca.lstrip("=").split(",") if s]


def _frozen(value: Any) -> Any:
    """A read-only copy of a settings subtree (mappings as proxies, lists as tuples)."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def plain(value: Any) -> Any:
    """A frozen subtree back as plain dicts and lists: what recipes and operations take (their
    arguments are fingerprinted as JSON, so they must read as they did in the YAML)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def strings(value: list[str] | None) -> tuple[str, ...]:
    """A list setting as a tuple (frozen), an absent one as empty."""
    return tuple(value or ())


@dataclass(frozen=True)
class PackagesConfig:
    rdma: tuple[str, ...] | None  # None: rdmaprov's own sets per distro family
    extra: tuple[str, ...]


@dataclass(frozen=True)
class AptMirror:
    url: str
    suite: str | None
    components: tuple[str, ...]
    key: str | None
    exclusive: bool


@dataclass(frozen=True)
class YumMirror:
    baseurl: str
    gpgkey: str | None
    exclusive: bool


@dataclass(frozen=True)
class RdmaConfig:
    devices: tuple[str, ...]
    storage_hcas: tuple[str, ...]
    netdevs: tuple[str, ...]
    rate_gbps: float | None
    gid_index: int | None
    port: int

    @property
    def compute_devices(self) -> list[str]:
        """The declared devices NCCL may use: storage HCAs never carry NCCL traffic."""
        return [d for d in self.devices if d not in self.storage_hcas]


@dataclass(frozen=True)
class MpiArchive:
    """A site's Open MPI install tree as a tarball on the control machine (mpi.source archive)."""

    path: str
    sha256: str
    version: str


@dataclass(frozen=True)
class MpiConfig:
    source: str  # distro, prefix or archive
    prefix: str | None
    archive: MpiArchive | None = None

    @property
    def root(self) -> str | None:
        """mpi.prefix without its trailing slash, where a non-distro MPI needs it; None for the distro's."""
        if self.source == "distro":
            return None
        if not self.prefix:
            raise ValueError(
                f"mpi.source is {self.source} but mpi.prefix is not set; give "
                + ("the install prefix (it has bin/mpirun)" if self.source == "prefix" else "where to unpack it")
            )
        if self.source == "archive" and self.archive is None:
            raise ValueError("mpi.source is archive but mpi.archive is not set; give the tarball's path")
        return self.prefix.rstrip("/")

    @property
    def install_prefix(self) -> str | None:
        """Where the site MPI (HPC-X…, or an unpacked archive's `current`) is; None for the distro's."""
        root = self.root
        if root is None or self.source == "prefix":
            return root
        return f"{root}/current"

    @property
    def mpicc(self) -> str:
        prefix = self.install_prefix
        return f"{prefix}/bin/mpicc" if prefix else "mpicc"

    @property
    def site_env(self) -> str:
        """Shell assignments that run a command in a site MPI's environment ('' for the distro's):
        OPAL_PREFIX says where its tree is now (an archive built for another prefix is relocated by
        it, and mpirun passes it on to the daemons it starts over SSH), and its libraries come
        first (its programs' RUNPATH may name the prefix it was built for)."""
        prefix = self.install_prefix
        if not prefix:
            return ""
        return (
            f'OPAL_PREFIX={sh(prefix)} LD_LIBRARY_PATH={sh(prefix + "/lib")}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
        )


@dataclass(frozen=True)
class GpuConfig:
    """A node with GPUs (count > 0); nodes without have `NodeConfig.gpu` None."""

    count: int
    model: str | None
    driver_version: str | None
    cuda_version: str | None
    arch: str | None
    repo: str | None
    repo_key: str | None
    nvswitch: bool | None = None  # None: auto, from the node's PCI bus
    kernel_modules: str = "auto"  # open, proprietary or auto
    dcgm_setting: bool | None = None  # None: auto

    def on_nvswitch(self, found: bool) -> bool:
        """Whether the GPUs sit on NVSwitch: as declared, else what the node's PCI bus shows (`found`)."""
        return self.nvswitch if self.nvswitch is not None else found

    @property
    def dcgm(self) -> bool:
        """DCGM is installed and its diagnostic run: as declared, else where rdmaprov manages the driver."""
        return self.dcgm_setting if self.dcgm_setting is not None else bool(self.driver_version)


@dataclass(frozen=True)
class NcclConfig:
    """The nccl section. `source` and `tests` stay mappings as written: they are the build
    recipes' settings, and the build ids of existing clusters are computed from them."""

    version: str | None
    source: Mapping[str, Any]
    tests: Mapping[str, Any]
    gencode: str | None
    prefix: str
    env: Mapping[str, Any]
    static_library: bool = False  # ship lib/libnccl_static.a too (nodes need it only to link statically)
    frameworks: tuple[str, ...] = ()  # Python interpreters whose PyTorch's NCCL verify reads

    @property
    def source_kind(self) -> str:
        return str(self.source["kind"])

    @property
    def tests_enabled(self) -> bool:
        return bool(self.tests["enabled"])

    @property
    def tests_prefix(self) -> str:
        return str(self.tests["prefix"])

    @property
    def all_reduce_perf(self) -> str:
        """Where the gate finds all_reduce_perf on a node."""
        return f"{self.tests_prefix.rstrip('/')}/current/bin/all_reduce_perf"


@dataclass(frozen=True)
class ErdmaConfig:
    repo: str | None
    key: str | None
    packages: tuple[str, ...] | None
    aiacc_plugin: str | None
    aiacc_version: str
    jumbo_frames: bool

    @property
    def mtu(self) -> int:
        """The MTU eRDMA's netdevs must have (a wrong one corrupts data)."""
        return 8500 if self.jumbo_frames else 1400


@dataclass(frozen=True)
class ExporterConfig:
    enabled: bool
    listen: str


@dataclass(frozen=True)
class NodeConfig:
    """One node's merged settings, typed; each field is read from one section of them (_READERS)."""

    fabric: str | None
    packages: PackagesConfig
    apt_mirror: AptMirror | None
    yum_mirror: YumMirror | None
    rdma: RdmaConfig
    mtu: Mapping[str, int]
    netns_mode: str | None
    memlock: str | int
    mpi: MpiConfig
    gpu: GpuConfig | None
    nccl: NcclConfig
    erdma: ErdmaConfig
    exporter: ExporterConfig
    tags: tuple[str, ...]
    builds: tuple[Mapping[str, Any], ...]
    roce_qos: RoceQos = field(default_factory=RoceQos)
    containers: ContainerConfig = field(default_factory=ContainerConfig)

    @classmethod
    def from_settings(cls, node: Mapping[str, object]) -> NodeConfig:
        """The typed view of merged settings that fill_defaults completed."""
        settings = Section.of(node)
        return cls(**{name: read(settings) for _, name, read in _READERS})

    def with_settings(self, node: Mapping[str, object], changed: Mapping[str, object]) -> NodeConfig:
        """This config with only the sections named in `changed` read again from `node`: a host's
        own vars over its groups' settings touch a section or two, and reading every section
        again for each of 10,000 hosts was a tenth of loading them."""
        settings = Section.of(node)
        fresh = {name: read(settings) for section, name, read in _READERS if section in changed}
        return replace(self, **fresh) if fresh else self

    @property
    def nccl_wanted(self) -> bool:
        """NCCL is installed on GPU nodes that declare a version."""
        return self.gpu is not None and bool(self.nccl.version)

    @property
    def gid_index(self) -> int | None:
        """The RoCE GID index NCCL (and the gates) use: nccl.env, else rdma.gid_index, else the fabric's."""
        declared = self.nccl.env.get("NCCL_IB_GID_INDEX")
        if declared is not None:
            return int(declared)
        if self.rdma.gid_index is not None:
            return self.rdma.gid_index
        return _FABRIC_GID_INDEX.get(self.fabric or "")

    @property
    def container_gpus(self) -> bool:
        """Containers on this node get its GPUs: a container runtime on a node with GPUs. The
        containers deploy installs the NVIDIA container toolkit for it, from the CUDA repository
        gpu_driver then sets up."""
        return self.containers.enabled and self.gpu is not None

    def nccl_environment(self) -> tuple[dict[str, str], list[str]]:
        """The NCCL variables for this node, and warnings about what had to be corrected.

        Storage HCAs must never carry NCCL traffic: a prefix that would match one is replaced by
        the exact list of compute devices, and the replacement is reported.
        """
        env = {key: str(value) for key, value in self.nccl.env.items()}
        warnings: list[str] = []
        storage = self.rdma.storage_hcas
        devices = self.rdma.compute_devices
        if "NCCL_IB_HCA" not in env:
            if self.fabric in _FABRIC_HCA:
                env["NCCL_IB_HCA"] = _FABRIC_HCA[self.fabric]
            elif devices:
                env["NCCL_IB_HCA"] = "=" + ",".join(devices)
        hca = env.get("NCCL_IB_HCA", "")
        if hca and not hca.startswith("^"):
            specs = hca_specs(hca)
            hit = [s for s in storage if any(spec_matches(spec, s) for spec in specs)]
            if hit:
                if not devices:
                    raise ValueError(
                        f"NCCL_IB_HCA={hca} matches storage HCA(s) {', '.join(hit)} and rdma.devices is empty, "
                        "so the compute HCAs cannot be listed instead; "
                        "declare rdma.devices or give NCCL_IB_HCA as =dev1,dev2"
                    )
                env["NCCL_IB_HCA"] = "=" + ",".join(d for d in devices if any(spec_matches(s, d) for s in specs))
                warnings.append(
                    f"NCCL_IB_HCA={hca} matched storage HCA(s) {', '.join(hit)}; wrote {env['NCCL_IB_HCA']} instead"
                )
        gid = self.gid_index
        if gid is not None:
            env["NCCL_IB_GID_INDEX"] = str(gid)
        if self.qos is not None:
            # one nccl.env sets differently is refused by the loader (qos_mismatches)
            for name, value in self.qos.nccl_env().items():
                env.setdefault(name, value)
        return dict(sorted(env.items())), warnings

    @property
    def rxe_devices(self) -> list[str]:
        """The rxe links the softroce deploy makes on this node (none on other fabrics)."""
        return [device for device, _ in rxe_links(list(self.rdma.netdevs))] if self.fabric == "softroce" else []

    @property
    def named_devices(self) -> list[str]:
        """The compute devices the inventory names: rdma.devices less the storage HCAs, else
        SoftRoCE's links; empty when the node's own devices decide."""
        return self.rdma.compute_devices or self.rxe_devices

    @property
    def qos(self) -> RoceQos | None:
        """The RoCE QoS chain where the hosts set it (declared, on a RoCE fabric), else None."""
        qos = self.roce_qos
        return qos if qos.enabled and qos.scope(self.fabric) is None else None

    def qos_mismatches(self) -> dict[str, str]:
        """{variable: why} for NCCL_IB_TC and NCCL_IB_SL that nccl.env sets against roce_qos:
        NCCL would send in another class than the NICs and switches treat as lossless."""
        qos = self.qos
        if qos is None:
            return {}
        return {
            name: f"nccl.env.{name} is {written} but roce_qos ({qos.profile}: DSCP {qos.dscp}, "
            f"priority {qos.priority}) makes it {value}"
            for name, value in qos.nccl_env().items()
            if (written := self.nccl.env.get(name)) is not None and str(written) != value
        }

    def wanted_mtus(self) -> dict[str, int]:
        """{netdev: mtu}: the declared ones, and the eRDMA rule on the RDMA netdevs."""
        mtus = dict(self.mtu)
        if self.fabric == "erdma":
            rule = self.erdma.mtu
            jumbo = "with" if rule == 8500 else "without"
            for netdev in self.rdma.netdevs:
                declared = mtus.setdefault(netdev, rule)
                if declared != rule:
                    raise ValueError(
                        f"mtu.{netdev} is {declared} but eRDMA {jumbo} jumbo frames needs {rule} "
                        f"(a wrong MTU corrupts data); fix mtu.{netdev} or erdma.jumbo_frames"
                    )
        return dict(sorted(mtus.items()))


@dataclass(frozen=True)
class SshTrustConfig:
    """Passwordless SSH between the nodes for `user` (MPI launches), with pinned host keys."""

    enabled: bool
    user: str
    key_type: str
    hosts_file: bool

    @classmethod
    def from_settings(cls, trust: Mapping[str, object]) -> SshTrustConfig:
        settings = Section.of(trust, ("ssh_trust",))
        return cls(
            settings.flag("enabled"), settings.text("user"), settings.text("key_type"), settings.flag("hosts_file")
        )


def _packages(node: Section) -> PackagesConfig:
    packages = node.section("packages")
    return PackagesConfig(packages.optional_texts("rdma"), packages.texts("extra"))


def _apt_mirror(node: Section) -> AptMirror | None:
    apt = node.section("mirror").section("apt")
    if not apt:
        return None
    return AptMirror(
        apt.text("url"),
        apt.optional_text("suite"),
        apt.texts("components"),
        apt.optional_text("key"),
        apt.flag("exclusive"),
    )


def _yum_mirror(node: Section) -> YumMirror | None:
    yum = node.section("mirror").section("yum")
    return YumMirror(yum.text("baseurl"), yum.optional_text("gpgkey"), yum.flag("exclusive")) if yum else None


def _rdma(node: Section) -> RdmaConfig:
    rdma = node.section("rdma")
    return RdmaConfig(
        rdma.texts("devices"),
        rdma.texts("storage_hcas"),
        rdma.texts("netdevs"),
        rdma.optional_number("rate_gbps"),
        rdma.optional_integer("gid_index"),
        rdma.integer("port"),
    )


def _mpi(node: Section) -> MpiConfig:
    mpi = node.section("mpi")
    archive = mpi.section("archive")
    source = mpi.text("source")
    return MpiConfig(
        source,
        mpi.optional_text("prefix"),
        MpiArchive(
            archive.text("path"), archive.optional_text("sha256") or "", archive.optional_text("version") or "site"
        )
        if archive and source == "archive"
        else None,  # a node whose source is another keeps the default's archive unused
    )


def _auto(section: Section, key: str) -> bool | None:
    """A true/false/auto setting: None for auto."""
    return None if section.get(key) == "auto" else section.flag(key)


def _gpu(node: Section) -> GpuConfig | None:
    gpu = node.section("gpu")
    if gpu.integer("count") <= 0:
        return None
    return GpuConfig(
        gpu.integer("count"),
        gpu.optional_text("model"),
        gpu.optional_text("driver_version"),
        gpu.optional_text("cuda_version"),
        gpu.optional_text("arch"),
        gpu.optional_text("repo"),
        gpu.optional_text("repo_key"),
        _auto(gpu, "nvswitch"),
        gpu.text("kernel_modules"),
        _auto(gpu, "dcgm"),
    )


def _nccl(node: Section) -> NcclConfig:
    nccl = node.section("nccl")
    return NcclConfig(
        nccl.optional_text("version"),
        _frozen(nccl.section("source").data),
        _frozen(nccl.section("tests").data),
        nccl.optional_text("gencode"),
        nccl.text("prefix"),
        _frozen(nccl.section("env").data),
        nccl.flag("static_library"),
        nccl.texts("frameworks"),
    )


def _erdma(node: Section) -> ErdmaConfig:
    erdma = node.section("erdma")
    return ErdmaConfig(
        erdma.optional_text("repo"),
        erdma.optional_text("key"),
        erdma.optional_texts("packages"),
        erdma.optional_text("aiacc_plugin"),
        erdma.text("aiacc_version"),
        erdma.flag("jumbo_frames"),
    )


def _memlock(limits: Section) -> str | int:
    """limits.memlock: "unlimited" or a number of bytes."""
    value = limits.get("memlock")
    return value if isinstance(value, str) else limits.integer("memlock")


def _exporter(exporter: Section) -> ExporterConfig:
    return ExporterConfig(exporter.flag("enabled"), exporter.text("listen"))


def _mtu(node: Section) -> Mapping[str, int]:
    mtu = node.section("mtu")
    return MappingProxyType({name: mtu.integer(name) for name in mtu.data})


# (section of the node settings, NodeConfig field, its reader): each field depends on its
# section alone, which is what lets NodeConfig.with_settings read again only what a host changed.
# Each reader is typed; the table hands their values to NodeConfig by field name, which mypy
# cannot follow, hence Any here alone.
_READERS: tuple[tuple[str, str, Callable[[Section], Any]], ...] = (
    ("fabric", "fabric", lambda node: node.optional_text("fabric")),
    ("packages", "packages", _packages),
    ("mirror", "apt_mirror", _apt_mirror),
    ("mirror", "yum_mirror", _yum_mirror),
    ("rdma", "rdma", _rdma),
    ("mtu", "mtu", _mtu),
    ("netns_mode", "netns_mode", lambda node: node.optional_text("netns_mode")),
    ("limits", "memlock", lambda node: _memlock(node.section("limits"))),
    ("mpi", "mpi", _mpi),
    ("gpu", "gpu", _gpu),
    ("nccl", "nccl", _nccl),
    ("erdma", "erdma", _erdma),
    ("exporter", "exporter", lambda node: _exporter(node.section("exporter"))),
    ("tags", "tags", lambda node: node.texts("tags")),
    ("builds", "builds", lambda node: tuple(_frozen(build.data) for build in node.sections("builds"))),
    ("roce_qos", "roce_qos", lambda node: RoceQos.from_settings(node.section("roce_qos").data)),
    ("containers", "containers", lambda node: ContainerConfig.from_settings(node.section("containers").data)),
)
