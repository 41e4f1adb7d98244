"""Inputs the loader and the Ansible import once accepted and must refuse (issue #30, item 7): each
is refused with the file, line and column, the setting's path and a fix, before anything connects."""

from __future__ import annotations

import pytest
import yaml

from rdmaprov.errors import UserError
from rdmaprov.importers.ansible import import_ansible
from rdmaprov.inventory import load_inventory
from tests.support.inventories import problems, write

HOST = "hosts:\n  n1: {}\n  n2: {}\n"
FINITE_FIX = "(fix: write a finite number; quote the value if it is text)"


# --- 1. every number is finite --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "position", "path", "read_as"),
    [
        (
            "cluster:\n  name: c\n  slurm:\n    enabled: true\n    mode: health_check\n"
            "    health_check: {max_drain_fraction: .nan}\n",
            "6:40",
            "cluster.slurm.health_check.max_drain_fraction",
            "not-a-number (.nan)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    all_reduce: {fraction: .NaN}\n",
            "4:28",
            "cluster.gates.all_reduce.fraction",
            "not-a-number (.nan)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    ib_write_bw: {max_fraction: .inf}\n",
            "4:33",
            "cluster.gates.ib_write_bw.max_fraction",
            "infinity (.inf)",
        ),
        (
            "cluster:\n  name: c\n  gates:\n    latency: {max_p99_us: 1.0e+400}\n",
            "4:27",
            "cluster.gates.latency.max_p99_us",
            "infinity (.inf)",
        ),
        (
            "cluster: {name: c}\ndefaults:\n  rdma: {rate_gbps: -.inf}\n",
            "3:21",
            "defaults.rdma.rate_gbps",
            "minus infinity (-.inf)",
        ),
    ],
    ids=["max_drain_fraction", "fraction", "max_fraction", "max_p99_us", "rate_gbps"],
)
def test_nan_and_infinity_are_refused_in_every_setting(tmp_path, settings, position, path, read_as):
    """NaN compares false with everything, so the schema's ranges let it through (a NaN share of
    nodes to drain, a NaN upper bound that checks nothing), and infinity is no threshold: one walk
    over the document refuses both wherever they are, in one message (minus infinity was refused
    before, as out of range of a lower bound)."""
    text = settings + (HOST if "hosts:" not in settings else "")
    inventory = write(tmp_path, text)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:{position}: {path}: YAML reads this value as {read_as}; every number in an inventory "
        f"must be finite {FINITE_FIX}"
    ]


# --- 2. lower and upper bounds are ordered --------------------------------------------------------

WARN_WHY = "a result passes from fraction up and warns only below warn_fraction, so it could never warn"
WARN_FIX = "make warn_fraction at least fraction (equal: no warning band), or turn fraction down"


@pytest.mark.parametrize(
    ("gates", "position", "path", "message", "fix"),
    [
        (
            "ib_write_bw: {fraction: 0.9, warn_fraction: 0.85}",
            "4:29",
            "cluster.gates.ib_write_bw.fraction",
            "fraction 0.9 is larger than warn_fraction 0.85: " + WARN_WHY,
            WARN_FIX,
        ),
        (
            "rail: {warn_fraction: 0.9}",
            "4:27",
            "cluster.gates.rail.warn_fraction",
            "fraction 0.95 (the default) is larger than warn_fraction 0.9: " + WARN_WHY,
            WARN_FIX,
        ),
        (
            "ib_write_bw: {duration_s: 60}",
            "4:31",
            "cluster.gates.ib_write_bw.duration_s",
            "duration_s 60 is not below timeout_s 60 (the default): timeout_s stops each run, so every run "
            "would be cut off before its measurement ends",
            "make timeout_s larger than duration_s, with a few seconds for perftest to connect",
        ),
        (
            "node: {min_bytes: 2G}",
            "4:23",
            "cluster.gates.node.min_bytes",
            "min_bytes 2G is larger than max_bytes 1G (the default)",
            "make min_bytes the smallest message size of the sweep and max_bytes the largest",
        ),
    ],
    ids=["ib_write_bw-warn", "rail-warn-under-default", "ib_write_bw-duration", "node-bytes"],
)
def test_bounds_of_a_gate_must_be_ordered(tmp_path, gates, position, path, message, fix):
    inventory = write(tmp_path, f"cluster:\n  name: c\n  gates:\n    {gates}\n" + HOST)
    assert problems(inventory, require_files=False) == [f"{inventory}:{position}: {path}: {message} (fix: {fix})"]


@pytest.mark.parametrize(
    "gates",
    [
        "rail: {fraction: 0.98}",  # above the default warn_fraction: no warning band, as written
        "all_reduce: {fraction: 0.9, warn_fraction: 0.9}",  # equal: no warning band, asked for
        "latency: {warn_fraction: 1}",  # warns above max_p99_us, where it fails: never
    ],
)
def test_a_gate_without_a_warning_band_is_accepted(tmp_path, gates):
    inventory = write(tmp_path, f"cluster:\n  name: c\n  gates:\n    {gates}\n" + HOST)
    gate, _, text = gates.partition(": ")
    settings = yaml.safe_load(text)
    typed = getattr(load_inventory(inventory, require_files=False).gates, gate)
    assert {key: getattr(typed, key) for key in settings} == settings


# --- 3. the local files an inventory names exist --------------------------------------------------

ARCHIVE = (
    "cluster: {{name: c}}\ndefaults:\n  mpi:\n    source: archive\n    prefix: /opt/site-mpi\n"
    "    archive: {{path: {path}}}\n"
)


def test_a_missing_mpi_archive_is_an_error_where_it_is_needed_and_a_warning_in_validate(tmp_path):
    """As the SSH key and known_hosts files: `validate` may run before the archive is built (a
    warning), a command that connects would ship it (an error)."""
    inventory = write(tmp_path, ARCHIVE.format(path="mpi/openmpi.tar.gz") + HOST)
    expected = (
        f"{inventory}:6:21: defaults.mpi.archive.path: MPI archive {tmp_path}/mpi/openmpi.tar.gz does not exist "
        "(fix: build the tarball (for the lab: `rdmaprov lab mpi`) or point mpi.archive.path at it)"
    )
    assert problems(inventory) == [expected]
    assert [w.format() for w in load_inventory(inventory, require_files=False).warnings] == [expected]


def test_an_mpi_archive_that_is_a_directory_is_refused_even_by_validate(tmp_path):
    (tmp_path / "mpi").mkdir()
    inventory = write(tmp_path, ARCHIVE.format(path="mpi") + HOST)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:6:21: defaults.mpi.archive.path: MPI archive {tmp_path}/mpi cannot be read: Is a directory "
        "(fix: point the setting at the file itself)"
    ]


def test_an_archive_of_a_node_whose_mpi_comes_from_elsewhere_is_not_needed(tmp_path):
    text = ARCHIVE.format(path="absent.tgz") + "hosts:\n  n1: {vars: {mpi: {source: distro}}}\n"
    assert load_inventory(write(tmp_path, text)).hosts["n1"].node.mpi.source == "distro"


# --- 4. a partition lists each host once ----------------------------------------------------------


def test_a_host_listed_twice_in_a_partition_is_named(tmp_path):
    inventory = write(
        tmp_path,
        "cluster:\n  name: c\n  slurm:\n    enabled: true\n    controller: n1\n"
        "    partitions: [{name: gpu, hosts: [n1, n2, n1]}]\n" + HOST,
    )
    assert problems(inventory, require_files=False) == [
        f"{inventory}:6:46: cluster.slurm.partitions[0].hosts[2]: partition 'gpu' names 'n1' twice (first as "
        "hosts[0]) (fix: name each host once)"
    ]


def test_a_host_listed_twice_in_all_reduce_hosts_is_named(tmp_path):
    inventory = write(tmp_path, "cluster:\n  name: c\n  gates:\n    all_reduce: {hosts: [n1, n2, n2]}\n" + HOST)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:4:34: cluster.gates.all_reduce.hosts[2]: all_reduce.hosts names 'n2' twice (first as "
        "hosts[1]) (fix: name each host once)"
    ]


# --- 5. no `..` in a path on the nodes ------------------------------------------------------------

NODE_PATH_FIX = (
    "(fix: An absolute path on the nodes, e.g. /opt/nccl: letters, digits, '_', '.', '+', '@', '-' and '/', "
    "with no '..' folder.)"
)


@pytest.mark.parametrize(
    ("vars_text", "position", "path", "value"),
    [
        ("mpi: {source: prefix, prefix: /opt/../usr}", "3:33", "defaults.mpi.prefix", "/opt/../usr"),
        ("nccl: {prefix: /opt/nccl/..}", "3:18", "defaults.nccl.prefix", "/opt/nccl/.."),
        ("nccl: {tests: {prefix: /../opt}}", "3:26", "defaults.nccl.tests.prefix", "/../opt"),
        (
            "builds: [{name: b, version: '1', source: {path: b.tgz}, build: make, prefix: /opt/b/../../etc}]",
            "3:80",
            "defaults.builds[0].prefix",
            "/opt/b/../../etc",
        ),
    ],
    ids=["mpi.prefix", "nccl.prefix", "nccl.tests.prefix", "builds.prefix"],
)
def test_dot_dot_in_a_path_on_the_nodes_is_refused(tmp_path, vars_text, position, path, value):
    inventory = write(tmp_path, f"cluster: {{name: c}}\ndefaults:\n  {vars_text}\n" + HOST)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:{position}: {path}: string '{value}' does not have the expected form {NODE_PATH_FIX}"
    ]


def test_dots_inside_a_name_on_the_nodes_are_fine(tmp_path):
    inventory = write(tmp_path, "cluster: {name: c}\ndefaults:\n  nccl: {prefix: /opt/nccl..2/.cache}\n" + HOST)
    assert load_inventory(inventory, require_files=False).hosts["n1"].node.nccl.prefix == "/opt/nccl..2/.cache"


# --- 6. a jump host in the Ansible inventory ------------------------------------------------------

JUMP_FIX = (
    "run rdmaprov on a machine that reaches the nodes directly (the jump host, for one) and import a copy of the "
    "Ansible inventory without {option}"
)


@pytest.mark.parametrize(
    ("name", "text", "where", "var", "how", "option", "value"),
    [
        (
            "inventory",
            "[gpu]\ngpu01\ngpu02\n[all:vars]\nansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p -q "
            "ubuntu@10.0.0.1\"'\n",
            "5: all",
            "ansible_ssh_common_args",
            "a proxy command",
            "ProxyCommand",
            "ssh -W %h:%p -q ubuntu@10.0.0.1",
        ),
        (
            "inventory",
            "[gpu]\ngpu01 ansible_ssh_extra_args='-J admin@bastion:2222'\ngpu02\n",
            "2: gpu01",
            "ansible_ssh_extra_args",
            "a jump host",
            "-J",
            "admin@bastion:2222",
        ),
        (
            "hosts.yml",
            "all:\n  children:\n    gpu:\n      hosts: {gpu01: , gpu02: }\n"
            "      vars: {ansible_ssh_common_args: '-oProxyJump=bastion'}\n",
            "5: gpu",
            "ansible_ssh_common_args",
            "a jump host",
            "ProxyJump",
            "bastion",
        ),
    ],
    ids=["ProxyCommand", "-J", "ProxyJump"],
)
def test_a_jump_host_in_the_ansible_inventory_refuses_the_import(tmp_path, name, text, where, var, how, option, value):
    """rdmaprov connects to every node directly: an inventory that reaches them through a jump host
    would import, validate, then fail to connect (or reach other machines of the same addresses)."""
    source = tmp_path / name
    source.write_text(text)
    hosts = "gpu01" if "gpu01 ansible_ssh_extra_args" in text else "gpu01, gpu02"
    with pytest.raises(UserError) as info:
        import_ansible(source, cwd=tmp_path)
    assert [p.format() for p in info.value.problems] == [
        f"{source}:{where}: {var} reaches the hosts through {how} ({option} {value}), which rdmaprov does "
        f"not support: it would connect to {hosts} directly (fix: {JUMP_FIX.format(option=option)})"
    ]


@pytest.mark.parametrize("args", ["-o ProxyCommand=none", "-o ServerAliveInterval=30 -o ProxyJump=none", "-4"])
def test_ssh_arguments_without_a_jump_host_still_import(tmp_path, args):
    source = tmp_path / "inventory"
    source.write_text(f"[gpu]\ngpu01\n[all:vars]\nansible_ssh_common_args='{args}'\n")
    result = import_ansible(source, cwd=tmp_path)
    assert f'ansible_ssh_common_args: "{args}"' in result.text


# --- every form the schema asks for is refused with a fix, never with its regex ----------------------


def _patterns(node: object, path: str = "") -> list[tuple[str, dict]]:
    """Every schema node that has a `pattern`, with where it is; property names are left out (their
    refusal says how a name may be written, whatever the pattern). A property named pattern (the
    workload figure's) is a schema, not a regex."""
    found: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.append((path, node))
        for key, value in node.items():
            if key != "propertyNames":
                found += _patterns(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _patterns(value, f"{path}[{index}]")
    return found


def test_every_pattern_of_the_schema_has_a_description_to_say_as_the_fix():
    from rdmaprov.schemas import load_schema

    undescribed = [path for path, node in _patterns(load_schema("inventory")) if not node.get("description")]
    assert undescribed == []


@pytest.mark.parametrize(
    ("settings", "position", "path", "value", "fix"),
    [
        (
            "defaults:\n  builds: [{name: ../evil, version: '1', source: {path: b.tgz}, build: make}]\n",
            "3:19",
            "defaults.builds[0].name",
            "../evil",
            "The build's name, part of its archive's and work folder's names: a letter or digit, then letters, "
            "digits, '_', '.', '+' or '-' (no '/'), e.g. my-tool.",
        ),
        (
            "cluster:\n  name: c\n  gates: {all_reduce: {max_bytes: 8 GB}}\n",
            "3:35",
            "cluster.gates.all_reduce.max_bytes",
            "8 GB",
            "A size in bytes: a whole number, optionally followed by K, M or G (powers of 1024), e.g. 64K, 1M, 8G.",
        ),
    ],
)
def test_a_value_of_the_wrong_form_is_refused_with_what_to_write(tmp_path, settings, position, path, value, fix):
    head = "" if settings.startswith("cluster:") else "cluster: {name: c}\n"
    inventory = write(tmp_path, head + settings + HOST)
    assert problems(inventory, require_files=False) == [
        f"{inventory}:{position}: {path}: string '{value}' does not have the expected form (fix: {fix})"
    ]
