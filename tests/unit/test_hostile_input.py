"""Hostile and sloppy inventories: each is refused with file:line:col, path and fix, or accepted
safely; never a traceback, never a hang, and usage errors never exit like a run's outcome."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory, source
from rdmaprov.inventory.limit import select_hosts
from rdmaprov.inventory.source import MAX_BYTES, MAX_DEPTH
from tests.conftest import rdmaprov
from tests.support.inventories import problems
from tests.support.inventories import write as _write

HOST = "hosts:\n  gpu1: {address: 10.0.0.1}\n"


def _problems(path: Path) -> list[str]:
    return problems(path, require_files=False)


def _only(path: Path) -> str:
    (problem,) = _problems(path)
    return problem


# --- the loader: bounded, and every odd YAML construct is an error with a position ------------


def test_alias_bomb_of_a_few_hundred_bytes_is_refused_at_once(tmp_path):
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    path = _write(tmp_path, "cluster: {name: c}\n" + "\n".join(rows) + "\n")
    assert path.stat().st_size < 500
    started = time.monotonic()
    problem = _only(path)
    assert time.monotonic() - started < 5  # not a timing target: a hang would never get here
    assert (
        "expands to more than 1,000,000 values" in problem
        and "fix: write the inventory without nested aliases" in problem
    )


def test_alias_inside_its_own_anchor(tmp_path):
    path = _write(tmp_path, "cluster: {name: c}\ndefaults: &d\n  tags: [*d]\n" + HOST)
    assert _only(path).startswith(f"{path}:3:10: alias *d refers to a value that contains it")


def test_undefined_alias_and_second_document(tmp_path):
    assert "alias *nope has no anchor &nope before it" in _only(_write(tmp_path, "cluster: *nope\n"))
    assert "more than one YAML document" in _only(_write(tmp_path, "cluster: {name: c}\n---\n" + HOST))


DEEP_BLOCKS = "".join("  " * level + "k:\n" for level in range(3_000))


@pytest.mark.parametrize("loader", ["SafeLoader", "CSafeLoader"])
@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, "{a: " * 5_000 + "b" + "}" * 5_000, "\n" + DEEP_BLOCKS]
)
def test_very_deep_nesting(tmp_path, monkeypatch, loader, text):
    """The loader's own limit and words, with PyYAML's parser or libyaml's (whose newer releases stop
    at 1,000 levels on their own, before the reader sees the 65th)."""
    if not hasattr(yaml, loader):
        pytest.skip(f"this PyYAML has no {loader}")
    monkeypatch.setattr(source, "_LOADER", getattr(yaml, loader))
    problem = _only(_write(tmp_path, "cluster: " + text + "\n"))
    assert f"nested more than {MAX_DEPTH} levels deep (fix: an inventory needs fewer than 10 levels" in problem


def test_complex_key(tmp_path):
    path = _write(tmp_path, "cluster: {name: c}\nhosts:\n  ? [a, b]\n  : {address: 10.0.0.1}\n")
    assert "hosts: a mapping key must be a plain name, not a list or mapping" in _only(path)


@pytest.mark.parametrize(
    "key, read_as",
    [
        ("1", "an integer (1)"),
        ("true", "the boolean true"),
        ("~", "null (nothing)"),
        ("001", "an integer (1)"),
        ("1.5", "a float (1.5)"),
    ],
)
def test_host_and_group_names_that_yaml_reads_as_other_types(tmp_path, key, read_as):
    path = _write(tmp_path, f"cluster: {{name: c}}\nhosts:\n  {key}: {{address: 10.0.0.1}}\n")
    assert (
        _only(path)
        == f"{path}:3:3: hosts.{key}: key {key} is read by YAML as {read_as}, not as a name (fix: quote it: '{key}')"
    )
    group = _write(tmp_path, f"cluster: {{name: c}}\ngroups:\n  {key}:\n    hosts: {{gpu1: {{address: 10.0.0.1}}}}\n")
    assert "quote it" in _only(group)


def test_quoted_numeric_host_name_is_fine(tmp_path):
    inventory = load_inventory(
        _write(tmp_path, "cluster: {name: c}\nhosts:\n  '001': {address: 10.0.0.1}\n"), require_files=False
    )
    assert inventory.host_names() == ["001"]


@pytest.mark.parametrize("value", ["!!python/object/apply:os.system ['true']", "!!set {a, b}", "!!binary aGk="])
def test_tags_are_refused_or_typed(tmp_path, value):
    problems = _problems(_write(tmp_path, f"cluster: {{name: c}}\ndefaults: {{tags: [{value}]}}\n" + HOST))
    assert problems and all("defaults.tags" in p for p in problems)


def test_merge_keys_still_work(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  a:
    vars: &common {fabric: roce, netns_mode: shared}
    hosts: {gpu1: {address: 10.0.0.1}}
  b:
    vars:
      <<: *common
      netns_mode: exclusive
    hosts: {gpu2: {address: 10.0.0.2}}
""",
    )
    inventory = load_inventory(path, require_files=False)
    assert inventory.hosts["gpu2"].node.fabric == "roce"
    assert inventory.hosts["gpu2"].node.netns_mode == "exclusive"


def test_oversized_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    assert f"more than the {MAX_BYTES:,} an inventory may have" in _only(path)


def test_fifo_as_inventory_or_key_does_not_block(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "is not a regular file (a pipe or a device?)" in _only(fifo)
    path = _write(tmp_path, f"cluster: {{name: c, ssh: {{key: {fifo}}}}}\n" + HOST)
    assert f"SSH key file {fifo} is not a regular file" in _only(path)


# --- the schema: known shapes get strict patterns, with no trailing newline let through --------


@pytest.mark.parametrize(
    "snippet, expected",
    [
        ('hosts:\n  "gpu1\\n": {address: 10.0.0.1}\n', "contains a newline"),
        ('cluster: {name: "c\\n"}\n' + HOST, "contains a newline"),
        ("defaults: {nccl: {env: {NCCL_DEBUG: \"x'\\ntouch /tmp/owned\\n'\"}}}\n" + HOST, "contains a newline"),
        ('defaults: {nccl: {env: {"NCCL_X\\n": "1"}}}\n' + HOST, "contains a newline"),
        (
            "hosts:\n  gpu1: {address: '127.0.0.2; touch x'}\n",
            "does not have the expected form (fix: An IPv4 or IPv6 address or a DNS name",
        ),
        ("hosts:\n  gpu1: {address: ' '}\n", "does not have the expected form"),
        ("hosts:\n  gpu1: {address: 10.0.0.1, ssh: {user: ''}}\n", "must not be empty"),
        (
            "hosts:\n  gpu1: {address: 10.0.0.1, ssh: {user: 'root; id'}}\n",
            "does not have the expected form (fix: A Unix user name",
        ),
        ("hosts:\n  gpu1: {address: 10.0.0.1, ssh: {port: 22.0}}\n", "expected an integer, found number 22.0"),
        ("defaults: {gpu: {count: 1.0e+32}}\n" + HOST, "expected an integer, found number 1e+32"),
        ("defaults: {gpu: {count: 1000}}\n" + HOST, "must be at least 0 and at most 64"),
        (
            "defaults: {exporter: {enabled: true, listen: '0.0.0.0:99999'}}\n" + HOST,
            "does not have the expected form (fix: ADDRESS:PORT",
        ),
        ('defaults: {exporter: {listen: "0.0.0.0:9879\\nExecStartPre=/bin/id"}}\n' + HOST, "contains a newline"),
        (
            "defaults: {gpu: {count: 8, driver_version: latest, cuda_version: '12.2'}}\n" + HOST,
            "gpu.driver_version: string 'latest' does not have",
        ),
        (
            "defaults: {packages: {extra: [--allow-unauthenticated]}}\n" + HOST,
            "packages.extra[0]: string '--allow-unauthenticated'",
        ),
        ("defaults: {rdma: {netdevs: ['eth0;reboot']}}\n" + HOST, "rdma.netdevs[0]"),
        ("defaults: {mtu: {'eth0 mtu 1; reboot': 9000}}\n" + HOST, "name string 'eth0 mtu 1; reboot' is not allowed"),
        ("defaults: {rdma: {devices: ['mlx5_0 -x 9']}}\n" + HOST, "rdma.devices[0]"),
        ("defaults: {mpi: {source: prefix, prefix: \"/opt/x'; id; '\"}}\n" + HOST, "mpi.prefix"),
        ("defaults: {nccl: {version: '2.18.3-1', gencode: '$(id)'}}\n" + HOST, "nccl.gencode"),
        ("defaults: {nccl: {version: '2.18; id'}}\n" + HOST, "nccl.version"),
        (
            'defaults: {mirror: {apt: {url: "http://m/debian bookworm main\\ndeb [trusted=yes] http://evil/ x"}}}\n'
            + HOST,
            "contains a newline",
        ),
        ("defaults: {mirror: {apt: {url: 'http://m/debian [trusted=yes]'}}}\n" + HOST, "mirror.apt.url"),
        (
            "defaults: {builds: [{name: b, version: '1', build: make, source: {kind: git, url: '--upload-pack=touch "
            "/tmp/x', ref: v1}}]}\n" + HOST,
            "builds[0].source.url",
        ),
        (
            "defaults: {builds: [{name: b, version: '1', build: make, source: {kind: git, url: 'https://h/r.git', ref: "
            "'--output=/x'}}]}\n" + HOST,
            "builds[0].source.ref",
        ),
        (
            "cluster: {name: c, gates: {all_reduce: {min_bytes: 8G, max_bytes: 1M}}}\n" + HOST,
            "min_bytes 8G is larger than max_bytes 1M",
        ),
        (
            "cluster: {name: c, gates: {all_reduce: {hosts: [gpu1, gpu9]}}}\n" + HOST,
            "all_reduce.hosts names 'gpu9', which is not a host",
        ),
        ("cluster: {name: c, ssh: {password_env: 'X; id'}}\n" + HOST, "cluster.ssh.password_env"),
    ],
)
def test_values_that_could_reach_a_node_unquoted_are_refused(tmp_path, snippet, expected):
    text = snippet if snippet.startswith("cluster:") else "cluster: {name: c}\n" + snippet
    problems = _problems(_write(tmp_path, text))
    assert any(expected in p for p in problems), problems
    assert all(":" in p.split(" ", 1)[0] for p in problems)  # file:line:col on every one


@pytest.mark.parametrize(
    "address", ["10.0.0.1", "fd00::11", "fe80::1%eth0", "gpu1.example.com", "gpu-01", "gpu1.cluster.local."]
)
def test_real_addresses_are_accepted(tmp_path, address):
    inventory = load_inventory(
        _write(tmp_path, f"cluster: {{name: c}}\nhosts:\n  gpu1: {{address: '{address}'}}\n"), require_files=False
    )
    assert inventory.hosts["gpu1"].address == address


def test_shell_syntax_in_free_text_is_accepted_and_left_to_quoting(tmp_path):
    """A quote in an NCCL value is legitimate text: accepted, and quoted where it is written."""
    path = _write(tmp_path, 'cluster: {name: c}\ndefaults: {nccl: {env: {NCCL_X: "a\'b $(id) `id` \\\\"}}}\n' + HOST)
    assert load_inventory(path, require_files=False).hosts["gpu1"].node.nccl.env["NCCL_X"] == "a'b $(id) `id` \\"


def test_build_scripts_keep_their_lines(tmp_path):
    path = _write(
        tmp_path,
        "cluster: {name: c}\ndefaults:\n  builds:\n    - {name: b, version: '1', source: {path: b.tgz}, build: "
        '"make\\n\\tmake install"}\n' + HOST,
    )
    assert load_inventory(path, require_files=False).hosts["gpu1"].node.builds[0]["build"] == "make\n\tmake install"


def test_host_in_two_groups_with_different_ssh_settings(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  a: {ssh: {user: alice, port: 22}, hosts: {n1: {address: 10.0.0.1}}}
  b: {ssh: {user: bob, port: 2222}, hosts: {n1: }}
""",
    )
    problems = _problems(path)
    assert any(
        "host 'n1' is in groups 'a' and 'b', which set ssh.user differently ('alice' vs 'bob')" in p
        and "fix: set user in the host's own ssh settings" in p
        for p in problems
    )
    assert any("ssh.port differently (22 vs 2222)" in p for p in problems)
    resolved = _write(
        tmp_path,
        path.read_text().replace("n1: {address: 10.0.0.1}", "n1: {address: 10.0.0.1, ssh: {user: carol, port: 22}}"),
    )
    assert load_inventory(resolved, require_files=False).hosts["n1"].ssh.user == "carol"


def test_private_key_readable_by_others_is_a_warning_naming_chmod(tmp_path):
    key = tmp_path / "id"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o644)
    inventory = load_inventory(_write(tmp_path, f"cluster: {{name: c, ssh: {{key: {key}}}}}\n" + HOST))
    (warning,) = inventory.warnings
    assert (
        f"SSH key file {key} can be read by other users (mode 0644); OpenSSH refuses such keys (fix: chmod 600 {key})"
        in warning.format()
    )
    key.chmod(0o600)
    assert not load_inventory(_write(tmp_path, f"cluster: {{name: c, ssh: {{key: {key}}}}}\n" + HOST)).warnings


# --- the command line: no traceback, and exit codes that never lie -----------------------------


@pytest.fixture
def usable_inventory(tmp_path) -> Path:
    key = tmp_path / "id"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    known = tmp_path / "known_hosts"
    known.write_text("")
    return _write(
        tmp_path,
        f"cluster: {{name: c, ssh: {{key: {key}, known_hosts: {known}}}}}\n"
        "hosts:\n  gpu1: {address: 127.0.0.1}\n  gpu2: {address: 127.0.0.2}\n",
    )


@pytest.mark.parametrize("limit", [[""], [","], [" , "], ["", ""]])
def test_empty_limit_selects_nothing_silently_never(usable_inventory, limit):
    with pytest.raises(UserError, match="names no host"):
        select_hosts(load_inventory(usable_inventory), limit)


@pytest.mark.parametrize(
    "command, limit",
    [("apply", ""), ("check", ","), ("bootstrap", ""), ("bootstrap", ","), ("verify", ""), ("facts", " , ")],
)
def test_empty_limit_is_an_error_before_anything_runs(usable_inventory, command, limit):
    proc = rdmaprov(command, str(usable_inventory), "--limit", limit, timeout=60)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "names no host: give host names, group names or globs" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("check", "-i", "x"),
        ("apply",),
        ("apply", "inv.yaml", "--serial"),
        ("validate",),
        ("lab", "up", "--nodes", "x"),
        ("verify", "inv.yaml", "--nope"),
        ("facts",),
        ("nonsense",),
        (),
    ],
)
def test_usage_errors_exit_64_never_a_run_outcome(args):
    proc = rdmaprov(*args, timeout=60)
    assert proc.returncode == 64, (proc.returncode, proc.stderr)
    assert "usage:" in proc.stderr and "(exit 64: usage error)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_validate_never_prints_a_traceback_for_the_cases_above(tmp_path):
    cases = [
        "cluster: &c [*c]\n",
        "cluster: {name: c}\nhosts: {1: x}\n",
        "? [a]\n: b\n",
        "cluster: " + "[" * 5000 + "]" * 5000 + "\n",
        "cluster: {name: c}\ndefaults: {gpu: {count: 8, driver_version: latest, cuda_version: '12.2'}}\n" + HOST,
    ]
    paths = [str(_write(tmp_path, text, f"case{index}.yaml")) for index, text in enumerate(cases)]
    proc = rdmaprov("validate", *paths, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert all(path in proc.stderr for path in paths)


@pytest.mark.parametrize(
    "vars_, expected",
    [
        ("{fabric: softroce}", "fabric softroce needs rdma.netdevs"),
        ("{mpi: {source: prefix}}", "mpi.source is prefix but mpi.prefix is not set"),
        ("{mpi: {source: archive, archive: {path: m.tgz}}}", "mpi.source is archive but mpi.prefix is not set"),
        ("{mpi: {source: archive, prefix: /opt/m}}", "mpi.source is archive but mpi.archive is not set"),
        (
            "{fabric: erdma, rdma: {netdevs: [eth0]}, mtu: {eth0: 9000}}",
            "mtu.eth0 is 9000 but eRDMA with jumbo frames needs 8500",
        ),
        (
            "{rdma: {storage_hcas: [mlx5_8]}, nccl: {env: {NCCL_IB_HCA: mlx5}}}",
            "matches storage HCA(s) mlx5_8 and rdma.devices is empty",
        ),
        (
            "{gpu: {count: 8}, nccl: {version: 2.18.3-1}}",
            "NCCL 2.18.3-1 is built (or installed from packages) for a CUDA version, but gpu.cuda_version is not set",
        ),
    ],
)
def test_settings_the_deploys_would_refuse_after_connecting_are_found_by_validate(tmp_path, vars_, expected):
    problem = _only(_write(tmp_path, "cluster: {name: c}\nhosts:\n  gpu1: {address: 10.0.0.1, vars: " + vars_ + "}\n"))
    assert expected in problem and "(host gpu1)" in problem


def test_issue_keys_name_every_node_key_the_checks_read():
    """The loader reuses a group's issues for hosts whose vars touch none of ISSUE_KEYS: a check
    reading another key must add it there, or a host's own bad value would go unreported."""
    import inspect
    import re

    from rdmaprov.inventory import semantics
    from rdmaprov.inventory.config import NodeConfig

    fields = set(NodeConfig.__dataclass_fields__)
    read = set(re.findall(r"node\.([a-z_]+)", Path(semantics.__file__).read_text()))
    for name in list(read):  # what the derivations semantics calls read in turn
        member = getattr(NodeConfig, name, None)
        if name not in fields and member is not None:
            read |= set(re.findall(r"self\.([a-z_]+)", inspect.getsource(getattr(member, "fget", member))))
    keys = {{"apt_mirror": "mirror", "yum_mirror": "mirror", "memlock": "limits"}.get(f, f) for f in read & fields}
    assert keys and keys <= semantics.ISSUE_KEYS


def test_host_vars_are_checked_on_their_own(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  g:
    vars: {fabric: softroce, rdma: {netdevs: [eth0]}}
    hosts:
      gpu1: {address: 10.0.0.1, vars: {tags: [a]}}
      gpu2: {address: 10.0.0.2, vars: {rdma: {netdevs: []}}}
""",
    )
    assert "fabric softroce needs rdma.netdevs" in _only(path) and "(host gpu2)" in _only(path)
