"""Inventory loading and validation: every broken case gives file:line:column, the path and a fix."""

from __future__ import annotations

import pytest

from rdmaprov.errors import UserError
from rdmaprov.inventory import load_inventory
from rdmaprov.inventory.config import NodeConfig, RdmaConfig
from rdmaprov.inventory.limit import select_hosts
from rdmaprov.inventory.model import deep_merge, fill_defaults, node_schema
from tests.conftest import REPO, rdmaprov
from tests.support.inventories import problems as _problems
from tests.support.inventories import write as _write


@pytest.mark.parametrize("name", ["prod", "erdma", "lab", "roce"])
def test_shipped_inventories_validate(name):
    inventory = load_inventory(REPO / "inventories" / f"{name}.yaml", require_files=False)
    assert len(inventory.hosts) == 2


def test_cli_validate_all_examples_exits_zero():
    names = ("prod", "erdma", "lab", "roce")
    proc = rdmaprov("validate", *(f"inventories/{name}.yaml" for name in names))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(": ok (2 hosts") == len(names)


def test_every_schema_error_reported_at_once_with_location_and_fix(tmp_path):
    path = _write(
        tmp_path,
        """cluster:
  name: c
  ssh: {user: root, prot: 22}
defaults:
  fabric: infiniban
groups:
  gpu:
    hosts:
      gpu3:
        ssh:
          port: twenty-two
""",
    )
    problems = _problems(path)
    assert problems == [
        f"{path}:3:21: cluster.ssh.prot: unknown key 'prot' (fix: did you mean 'port'?)",
        f"{path}:5:11: defaults.fabric: string 'infiniban' is not allowed (fix: did you mean 'infiniband'? use one of: "
        "infiniband, roce, erdma, softroce)",
        f"{path}:11:17: groups.gpu.hosts.gpu3.ssh.port: expected an integer, found string 'twenty-two' (fix: write an "
        "integer — SSH port.)",
    ]


def test_out_of_range_and_missing_required(tmp_path):
    path = _write(tmp_path, "cluster:\n  ssh: {port: 70000}\nhosts: {a: {}}\n")
    problems = _problems(path)
    assert any(p.startswith(f"{path}:2:3: cluster: missing required key 'name'") for p in problems)
    assert any(
        f"{path}:2:15: cluster.ssh.port: number 70000 is out of range: must be at least 1 and at most 65535" in p
        for p in problems
    )


def test_unknown_key_without_close_match_lists_allowed_keys(tmp_path):
    path = _write(tmp_path, "cluster: {name: c}\nhosts:\n  a: {flavour: big}\n")
    (problem,) = _problems(path)
    assert "hosts.a.flavour: unknown key 'flavour' (fix: allowed keys here: address, ssh, vars)" in problem
    assert problem.startswith(f"{path}:3:7:")


def test_broken_yaml_is_one_line_with_position(tmp_path):
    path = _write(tmp_path, "cluster:\n  name: [oops\n")
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}:3:1: invalid YAML:")


def test_missing_file_and_directory(tmp_path):
    assert _problems(tmp_path / "nope.yaml") == [
        f"{tmp_path / 'nope.yaml'}: file not found (fix: check the path; inventories usually live in inventories/)"
    ]
    assert "is a directory" in _problems(tmp_path)[0]


def test_duplicated_yaml_key(tmp_path):
    path = _write(tmp_path, "cluster:\n  name: a\nhosts:\n  n1: {address: 10.0.0.1}\n  n1: {address: 10.0.0.2}\n")
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}:5:3: hosts.n1: duplicated key 'n1' (first defined on line 4)")


def test_host_defined_twice_across_groups(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  a:
    hosts:
      n1: {address: 10.0.0.1}
  b:
    hosts:
      n1: {address: 10.0.0.1}
""",
    )
    (problem,) = _problems(path)
    assert problem.startswith(
        f"{path}:8:7: groups.b.hosts.n1: host 'n1' is defined twice (first at line 5, groups.a.hosts.n1)"
    )
    assert "list it in other groups with no body, as `n1:`" in problem


def test_host_in_two_groups_with_conflicting_vars(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  a:
    vars: {netns_mode: exclusive}
    hosts:
      n1: {address: 10.0.0.1}
  b:
    vars: {netns_mode: shared}
    hosts:
      n1:
""",
    )
    (problem,) = _problems(path)
    assert (
        "groups.b.vars.netns_mode: host 'n1' is in groups 'a' and 'b', which set netns_mode differently ('exclusive' "
        "vs 'shared')" in problem
    )
    assert problem.startswith(f"{path}:8:24:")


def test_host_vars_resolve_group_conflict_and_precedence(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
defaults:
  fabric: roce
  netns_mode: shared
  rdma: {devices: [mlx5_0], rate_gbps: 100}
groups:
  a:
    vars: {netns_mode: exclusive, rdma: {rate_gbps: 200}}
    hosts:
      n1: {address: 10.0.0.1, vars: {netns_mode: shared}}
  b:
    vars: {netns_mode: shared}
    hosts:
      n1:
      n2: {address: 10.0.0.2}
""",
    )
    inv = load_inventory(path)
    n1 = inv.hosts["n1"].node
    assert n1.netns_mode == "shared"
    assert n1.rdma == RdmaConfig(
        devices=("mlx5_0",), storage_hcas=(), netdevs=(), rate_gbps=200, gid_index=None, port=1
    )
    assert n1.memlock == "unlimited"  # schema default filled in
    assert inv.hosts["n2"].node.rdma.rate_gbps == 100
    assert inv.groups == {"a": ("n1",), "b": ("n1", "n2")}


def test_key_files(tmp_path):
    missing = _write(tmp_path, "cluster:\n  name: c\n  ssh: {key: keys/id}\nhosts: {a: {}}\n")
    (problem,) = _problems(missing)
    assert problem.startswith(f"{missing}:3:14: cluster.ssh.key: SSH key file {tmp_path}/keys/id does not exist")
    # validate without connecting: a key not created yet is only a warning
    assert load_inventory(missing, require_files=False).warnings

    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("ssh-ed25519 AAAA... this is a public key\n")
    (problem,) = _problems(missing, require_files=False)
    assert "is not a private key (fix: point it at the private half" in problem

    (tmp_path / "keys" / "id").unlink()
    (tmp_path / "keys" / "id").mkdir()
    (problem,) = _problems(missing, require_files=False)
    assert "cannot be read: Is a directory" in problem


def test_cli_prints_problems_without_traceback(tmp_path):
    path = _write(tmp_path, "cluster:\n  name: c\n  gates: {ib_write_bw: {fraction: 2}}\nhosts: {a: {}}\n")
    proc = rdmaprov("validate", str(path))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        f"{path}:3:35: cluster.gates.ib_write_bw.fraction: number 2 is out of range: must be more than 0 and at most 1"
        in proc.stderr
    )


def test_limit_patterns(tmp_path):
    path = _write(
        tmp_path,
        """cluster: {name: c}
groups:
  gpu:
    hosts:
      g1: {address: 10.0.0.1}
      g2: {address: 10.0.0.2}
hosts:
  login: {address: 10.0.0.3}
""",
    )
    inv = load_inventory(path)
    assert select_hosts(inv, None) == ["g1", "g2", "login"]
    assert select_hosts(inv, ["gpu"]) == ["g1", "g2"]
    assert select_hosts(inv, ["g*,login"]) == ["g1", "g2", "login"]
    with pytest.raises(UserError, match="matches no host or group"):
        select_hosts(inv, ["gpu9"])


def test_a_gid_index_that_is_no_number_is_named_as_itself(tmp_path):
    """It once surfaced as `NCCL_IB_HCA: invalid literal for int()`, with the fix for the HCA list."""
    path = _write(
        tmp_path,
        "cluster: {name: c}\ndefaults:\n  fabric: roce\n  nccl:\n    env: {NCCL_IB_GID_INDEX: x}\nhosts: {a: {}}\n",
    )
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}:5:30: defaults.nccl.env.NCCL_IB_GID_INDEX: string 'x' does not have the ")
    assert "fix: write a whole number, e.g. 3" in problem and "NCCL_IB_HCA" not in problem
    for good in ("3", 3):
        inventory = load_inventory(
            _write(
                tmp_path,
                f"cluster: {{name: c}}\nhosts:\n  a:\n    vars:\n      nccl:\n"
                f"        env: {{NCCL_IB_GID_INDEX: {good!r}}}\n",
            ),
            require_files=False,
        )
        assert inventory.hosts["a"].node.gid_index == 3


def test_problems_at_one_place_keep_the_order_they_were_found_in():
    """A set's order changes with Python's hash seed: the same inventory gave its problems in a
    different order from run to run."""
    from rdmaprov.errors import Problem
    from rdmaprov.inventory.loader import in_file_order

    late, first, second = (Problem("f", m, line=line, column=1) for m, line in (("c", 9), ("b", 2), ("a", 2)))
    assert in_file_order([late, first, second, first]) == [first, second, late]


def test_a_hosts_own_vars_give_the_config_its_whole_settings_would(tmp_path):
    """The loader reads again only the sections a host's own vars touch (NodeConfig.with_settings):
    each host must still get exactly the config of its settings read whole."""
    path = _write(
        tmp_path,
        """cluster:
  name: c
  ssh: {user: root}
defaults:
  fabric: roce
  rdma: {devices: [mlx5_0, mlx5_1], rate_gbps: 200}
  gpu: {count: 8, driver_version: '550.54.15', cuda_version: '12.4'}
  nccl: {version: 2.21.5-1, env: {NCCL_DEBUG: WARN}}
groups:
  gpu:
    vars: {mtu: {eth0: 9000}, mirror: {apt: {url: 'http://mirror/debian', suite: bookworm}}}
    hosts:
      plain: {address: 10.0.0.1}
      tagged: {address: 10.0.0.2, vars: {tags: [a]}}
      rdma: {address: 10.0.0.3, vars: {rdma: {devices: [mlx5_2]}, tags: [b]}}
      nccl: {address: 10.0.0.4, vars: {nccl: {env: {NCCL_DEBUG: INFO}}, limits: {memlock: 1048576}}}
      cpu: {address: 10.0.0.5, vars: {gpu: {count: 0}, mirror: {yum: {baseurl: 'http://mirror/el9'}}}}
      qos: {address: 10.0.0.6, vars: {roce_qos: {priority: 3}, mtu: {eth1: 4200}, netns_mode: exclusive}}
""",
    )
    inventory = load_inventory(path, require_files=False)
    schema, root = node_schema()
    data = inventory.raw
    for name, host in inventory.hosts.items():
        whole = deep_merge(
            deep_merge(data["defaults"], data["groups"]["gpu"]["vars"]),
            data["groups"]["gpu"]["hosts"][name].get("vars") or {},
        )
        assert host.node == NodeConfig.from_settings(fill_defaults(whole, schema, root)), name
    assert inventory.hosts["rdma"].node.rdma.devices == ("mlx5_2",)
    assert inventory.hosts["cpu"].node.gpu is None and inventory.hosts["cpu"].node.yum_mirror is not None
    assert inventory.hosts["plain"].node.gpu is not None and inventory.hosts["plain"].node.yum_mirror is None
