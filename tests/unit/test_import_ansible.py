"""`rdmaprov import ansible`: Ansible (and DeepOps) inventories read as Ansible reads them, checked
against `ansible-inventory --list` of the same files, turned into inventories that validate through
the real CLI, with every refusal naming its file and line; and `validate` on an Ansible inventory
saying how to import it."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rdmaprov.errors import UserError
from rdmaprov.importers.ansible import import_ansible
from rdmaprov.importers.ansible.importer import cluster_name
from rdmaprov.importers.ansible.model import ALL, MAX_GROUPS, MAX_HOSTS, MAX_MEMBERSHIPS, is_encrypted
from rdmaprov.importers.ansible.patterns import PatternError, expand, hosts_of
from rdmaprov.importers.ansible.reader import read_ansible
from rdmaprov.importers.ansible.render import comment_text
from rdmaprov.inventory import load_inventory
from tests.conftest import FIXTURES, REPO, rdmaprov

ANSIBLE = FIXTURES / "ansible"
DEEPOPS = ANSIBLE / "deepops" / "inventory"
YAML_INV = ANSIBLE / "yaml" / "hosts.yml"
CASES = [DEEPOPS, YAML_INV]


def _ansible_value(value: Any) -> Any:
    """ansible-inventory's JSON wraps !unsafe text; rdmaprov reads it as the text it is."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: _ansible_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ansible_value(item) for item in value]
    return value


def _ours(value: Any) -> Any:
    if is_encrypted(value):
        return {"__ansible_vault": value.text.strip()}
    if isinstance(value, dict):
        return {key: _ours(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ours(item) for item in value]
    return value


def _vault_stripped(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__ansible_vault"}:
        return {"__ansible_vault": value["__ansible_vault"].strip()}
    return value


# --- the reader against Ansible's own answer -----------------------------------------------------


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.parent.name)
def test_hosts_groups_and_merged_vars_are_what_ansible_inventory_lists(path):
    """tests/fixtures/ansible/*/ansible-inventory-list.json is ansible-core 2.19's own `--list` of the
    same files: the same hosts, each group's hosts and children, and every host's variables after
    Ansible's precedence (group_vars/all over the file's group vars, deeper groups over their
    parents, names breaking ties, host_vars last, a vars directory's files in sorted order)."""
    want = json.loads((path.parent / "ansible-inventory-list.json").read_text())
    inventory = read_ansible(path)

    assert sorted(inventory.hosts) == sorted(want["_meta"]["hostvars"])
    for name, group in inventory.groups.items():
        listed = want.get(name, {})
        if name != ALL:  # ansible-inventory lists `all`'s children only
            assert group.hosts == listed.get("hosts", []), name
        assert group.children == listed.get("children", []), name
    assert set(want) - {"_meta"} <= set(inventory.groups)

    for name, host in inventory.hosts.items():
        ours = {key: _ours(var.value) for key, var in inventory.effective_vars(host).items()}
        theirs = {key: _vault_stripped(_ansible_value(value)) for key, value in want["_meta"]["hostvars"][name].items()}
        assert ours == theirs, name


def test_each_variable_knows_its_file_and_line():
    inventory = read_ansible(DEEPOPS)
    gpu02 = inventory.effective_vars(inventory.hosts["gpu02"])
    assert str(gpu02["ansible_port"].origin) == f"{DEEPOPS}:15"
    assert str(gpu02["ntp_server"].origin) == f"{DEEPOPS.parent}/group_vars/all/network.yml:3"
    assert str(gpu02["slurm_role"].origin) == f"{DEEPOPS.parent}/group_vars/slurm-node.yml:2"
    gpu01 = inventory.effective_vars(inventory.hosts["gpu01"])
    assert str(gpu01["ansible_user"].origin) == f"{DEEPOPS.parent}/host_vars/gpu01:3"


# --- import through the real CLI: the output validates and connects where Ansible would ----------


def _import(tmp_path: Path, source: Path, *args: str) -> tuple[Path, Any]:
    out = tmp_path / "imported.yaml"
    proc = rdmaprov("import", "ansible", str(source), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    check = rdmaprov("validate", str(out))
    assert check.returncode == 0, check.stderr
    assert "ok (" in check.stdout
    return out, proc


def _connection(inventory) -> dict[str, tuple]:
    return {n: (h.address, h.ssh.user, h.ssh.port, h.ssh.key) for n, h in inventory.hosts.items()}


def test_deepops_inventory_imports_into_a_valid_inventory_with_ansibles_connections(tmp_path):
    out, proc = _import(tmp_path, DEEPOPS, "--name", "dgx")
    inventory = load_inventory(out, require_files=False)
    key = str(REPO / "keys" / "slurm_ed25519")  # relative to where Ansible runs, as ssh reads it
    assert _connection(inventory) == {
        "mgmt01": ("10.20.0.1", "ubuntu", 2222, None),
        "mgmt02": ("10.20.0.2", "ubuntu", 2222, None),
        "login01": ("10.20.1.1", "centos", 22, None),  # ansible_ssh_user beats [all:vars] ansible_user
        "gpu01": ("10.20.2.1", "admin", 22, key),  # host_vars/gpu01 (no extension)
        "gpu02": ("10.20.2.2", "ubuntu", 2202, key),
        "gpu03.cluster.local": ("gpu03.cluster.local", "ubuntu", 22, key),  # gpu[03:04] expanded
        "gpu04.cluster.local": ("gpu04.cluster.local", "ubuntu", 22, key),
    }
    assert inventory.name == "dgx"
    assert inventory.groups["slurm-cluster"] == (
        "login01",
        "gpu01",
        "gpu02",
        "gpu03.cluster.local",
        "gpu04.cluster.local",
    )
    assert inventory.groups["k8s-cluster"] == ("mgmt01", "mgmt02", "gpu01", "gpu02")
    assert inventory.groups["nfs-clients"] == inventory.groups["slurm-node"]
    assert inventory.groups["storage"] == ()

    data = yaml.safe_load(out.read_text())
    # Each setting where it holds for everyone below: the cluster, a group, else the host.
    # Each setting where the Ansible inventory set it; a host gets what it would not inherit.
    assert data["cluster"]["ssh"] == {"user": "ubuntu", "known_hosts": "~/.ssh/known_hosts"}
    assert data["groups"]["kube-master"]["ssh"] == {"port": 2222}
    assert data["groups"]["slurm-node"]["ssh"] == {"key": key}
    assert data["hosts"]["gpu01"] == {"address": "10.20.2.1", "ssh": {"user": "admin"}}
    assert data["hosts"]["login01"]["ssh"] == {"user": "centos"}
    assert data["hosts"]["gpu03.cluster.local"] == {}

    text = out.read_text()
    assert 'ansible (group all): ansible_ssh_common_args: "-o ServerAliveInterval=30"' in text
    assert f"({DEEPOPS}:85)" in text
    assert "# ansible: slurm_password: <not copied: a secret>" in text
    assert "ChangeMeInTheVault" not in text
    assert '# ansible: sm_module_root: "{{ sm_prefix }}/modules"' in text
    assert "# ansible: slurm_cluster_install_cuda: false" in text
    assert "# Ansible children: slurm-master, slurm-node" in text
    assert "known_hosts: ~/.ssh/known_hosts  # every node's host key must be in this file" in text
    assert "StrictHostKeyChecking" not in text.split("# ansible")[0]
    assert "imported 7 hosts and 11 groups" in proc.stderr


def test_yaml_inventory_imports_with_the_ansible_ssh_spellings_and_vault_values(tmp_path):
    out, _ = _import(tmp_path, YAML_INV, "--known-hosts", "/etc/ssh/ssh_known_hosts")
    inventory = load_inventory(out, require_files=False)
    key = os.path.expanduser("~/.ssh/cluster_ed25519")
    assert _connection(inventory) == {
        "a100-01": ("a100-01", "gpuops", 22, key),
        "a100-02": ("a100-02", "gpuops", 22, key),
        "h100-01": ("10.30.1.11", "gpuops", 2201, key),
        "h100-02": ("10.30.1.12", "gpuops", 2202, key),  # ansible_ssh_host and "2202" win
        "login01": ("10.30.0.10", "admin", 22, key),
        "nfs01.example.com": ("nfs01.example.com", "ops", 22, key),
    }
    assert inventory.name == "yaml"  # hosts.yml says nothing: the directory's name
    assert inventory.groups["gpu"] == ("a100-01", "a100-02", "h100-01", "h100-02")
    data = yaml.safe_load(out.read_text())
    assert data["cluster"]["ssh"] == {
        "user": "ops",
        "key": "~/.ssh/cluster_ed25519",
        "known_hosts": "/etc/ssh/ssh_known_hosts",
    }
    assert data["groups"]["gpu"]["ssh"] == {"user": "gpuops"}
    assert data["hosts"]["login01"]["ssh"] == {"user": "admin"}
    assert data["hosts"]["h100-02"] == {"address": "10.30.1.12", "ssh": {"port": 2202}}
    text = out.read_text()
    assert "# ansible: ansible_become_password: <encrypted with ansible-vault: not copied>" in text
    assert '# ansible: nccl_net_plugin: "{{ not a template }}"' in text
    assert f"({YAML_INV.parent}/host_vars/login01/main.yml:2)" in text


def test_output_is_never_overwritten_unless_asked(tmp_path):
    out = tmp_path / "prod.yaml"
    out.write_text("mine\n")
    proc = rdmaprov("import", "ansible", str(DEEPOPS), "-o", str(out))
    assert proc.returncode == 1
    assert f"{out}: exists: not overwritten (fix: pass --force to replace it, or choose another -o)" in proc.stderr
    assert out.read_text() == "mine\n"
    assert rdmaprov("import", "ansible", str(DEEPOPS), "-o", str(out), "--force").returncode == 0
    assert out.read_text().startswith("# rdmaprov inventory imported")
    assert [p.name for p in tmp_path.iterdir()] == ["prod.yaml"]  # no temp file left


def test_stdout_by_default(tmp_path):
    proc = rdmaprov("import", "ansible", str(YAML_INV))
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout)["cluster"]["name"] == "yaml"
    assert "imported 6 hosts" in proc.stderr and "kept as comments to translate" not in proc.stdout


# --- what cannot be represented is an error naming the file and line, never a broken output ------


def _refused(tmp_path: Path, name: str, text: str) -> str:
    """The problems importing `text` reports, formatted as the CLI prints them (it must fail)."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError) as info:
        import_ansible(path)
    return "\n".join(problem.format() for problem in info.value.problems)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "inventory",
            '[gpu]\ngpu01 ansible_host=\'{{ lookup("env", "IP") }}\'\n',
            'inventory:2: gpu01: ansible_host \'{{ lookup("env", "IP") }}\' is a Jinja template, which rdmaprov '
            "does not evaluate (fix: write the value itself for ansible_host",
        ),
        (
            "inventory",
            "[gpu]\nfd00::11\n",
            "inventory:2: host name 'fd00::11' is not one rdmaprov accepts",
        ),
        (
            "inventory",
            "[gpu]\ngpu01 ansible_host=10.0.0.1\ngpu02 ansible_host=10.0.0.1\n",
            "inventory:3: gpu02: hosts 'gpu01' and 'gpu02' are both reached at 10.0.0.1:22",
        ),
        (
            "inventory",
            "[gpu]\ngpu01 ansible_host='10.0.0.1; reboot'\n",
            "inventory:2: gpu01: ansible_host '10.0.0.1; reboot' is not an IPv4 or IPv6 address or a DNS name",
        ),
        (
            "inventory",
            "[gpu]\ngpu01 ansible_port=70000\n",
            "inventory:2: gpu01: ansible_port 70000 is not a port number (1-65535)",
        ),
        (
            "hosts.yml",
            "all:\n  hosts:\n    gpu01:\n      ansible_user: 'root\\nx'\n",
            "hosts.yml:4: gpu01: ansible_user",
        ),
        (
            "hosts.yml",
            "all:\n  hosts:\n    gpu01:\n      ansible_user: !vault |\n"
            "        $ANSIBLE_VAULT;1.1;AES256\n        3131\n",
            "hosts.yml:4: gpu01: ansible_user is encrypted with ansible-vault, which rdmaprov cannot decrypt",
        ),
        ("inventory", "[gpu:hosts\n", "inventory:1: host pattern '[gpu:hosts' has a '[' without its ']'"),
        (
            "inventory",
            "[gpu:members]\ngpu01\n",
            "inventory:1: section [gpu:members] has an unknown kind 'members' (fix: use [group:vars] or "
            "[group:children])",
        ),
        (
            "inventory",
            "[a b]\ngpu01\n",
            "inventory:1: section header '[a b]' is not one Ansible reads (fix: write [group], [group:vars] or "
            "[group:children], with no spaces inside the brackets)",
        ),
        (
            "inventory",
            "[all]\ngpu01\n[gpu:children]\nh100\n",
            "inventory:4: [gpu:children] names group 'h100', which no section declares (fix: add a [h100] section",
        ),
        ("inventory", "[gpu:vars]\nx=1\n[all]\ngpu01\n", "inventory:1: [gpu:vars] sets variables of group 'gpu'"),
        ("inventory", "[gpu]\ngpu01 ansible_host='10.0.0.1\n", "inventory:2: cannot read the host line: No closing"),
        (
            "inventory",
            "[gpu]\ngpu01 10.0.0.1\n",
            "inventory:2: expected name=value after host 'gpu01', found '10.0.0.1'",
        ),
        ("inventory", "[gpu]\ngpu[01:1x]\n", "inventory:2: range [01:1x] must count numbers or single letters"),
        ("inventory", "[gpu]\ngpu[01:100]\n", "inventory:2: range [01:100]: a zero-padded begin and the end"),
        ("inventory", "[gpu]\ngpu[1:4:0]\n", "inventory:2: range [1:4:0] has a step below 1"),
        ("inventory", "[gpu]\ngpu[1:4\n", "inventory:2: host pattern 'gpu[1:4' has a '[' without its ']'"),
        (
            "hosts.yml",
            "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
            "hosts.yml:5: group 'b' is made a child of 'a', which is already inside it (a loop)",
        ),
        ("hosts.yml", "all:\n  hosts: [gpu01]\n", "hosts.yml:2: hosts of group 'all' must be a mapping"),
        ("hosts.yml", "all:\n  hosts:\n    gpu01: 3\n", "hosts.yml:3: host 'gpu01' must map to its variables"),
        (
            "hosts.yml",
            "all:\n  hosts:\n    gpu01:\n    gpu01:\n",
            "hosts.yml:4:5: all.hosts.gpu01: duplicated key 'gpu01'",
        ),
        ("hosts.yml", "all:\n  hosts:\n   gpu01\n  x: [\n", "hosts.yml:5:1: invalid YAML"),
        (
            "aws_ec2.yml",
            "plugin: amazon.aws.aws_ec2\nregions: [eu-west-1]\n",
            "is the configuration of Ansible's inventory plugin 'amazon.aws.aws_ec2' (a dynamic inventory)",
        ),
        ("inventory", "# [all]\n# gpu01 ansible_host=10.0.0.1\n", "this Ansible inventory (INI) names no hosts"),
    ],
)
def test_what_cannot_be_imported_is_refused_with_file_line_and_fix(tmp_path, name, text, expected):
    assert expected in _refused(tmp_path, name, text)


def test_every_problem_at_once_through_the_cli_and_nothing_written(tmp_path):
    (tmp_path / "inventory").write_text("[gpu:nope]\n[gpu]\ngpu01 x\ngpu[1:\n")
    out = tmp_path / "out.yaml"
    proc = rdmaprov("import", "ansible", str(tmp_path / "inventory"), "-o", str(out))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert [line.split(": ")[1] for line in proc.stderr.splitlines()] == [
        f"{tmp_path}/inventory:{line}" for line in (1, 3, 4)
    ]
    assert not out.exists() and proc.stdout == ""


def test_name_and_known_hosts_options_are_checked(tmp_path):
    proc = rdmaprov("import", "ansible", str(DEEPOPS), "--name", "my cluster")
    assert proc.returncode == 1 and "--name: 'my cluster' is not a cluster name" in proc.stderr
    proc = rdmaprov("import", "ansible", str(DEEPOPS), "--known-hosts", "a\nb")
    assert proc.returncode == 1 and "contains a control character" in proc.stderr
    assert rdmaprov("import", "ansible").returncode == 64


# --- hostile input: bounded, and no value can escape its comment -----------------------------------


def test_a_range_that_would_fill_the_memory_is_refused_before_expanding(tmp_path):
    start = time.monotonic()
    stderr = _refused(tmp_path, "inventory", "[gpu]\nn[0:99999999]\nm[0:999]x[0:999]\n")
    assert time.monotonic() - start < 30
    assert f"range [0:99999999] stands for more than {MAX_HOSTS:,} hosts" in stderr
    assert f"host pattern 'm[0:999]x[0:999]' stands for more than {MAX_HOSTS:,} hosts" in stderr


def test_inventories_too_large_for_any_cluster_are_refused_early(tmp_path):
    half = MAX_HOSTS // 2 + 1
    stderr = _refused(tmp_path, "inventory", f"[a]\na[1:{half}]\n[b]\nb[1:{half}]\n")
    assert f"inventory:4: the inventory names more than {MAX_HOSTS:,} hosts" in stderr
    groups = "".join(f"[g{i}]\n" for i in range(MAX_GROUPS))
    assert f"more than {MAX_GROUPS:,} groups" in _refused(tmp_path, "inventory", "[all]\nh1\n" + groups)
    # A chain of children lists every host once per group above it: bounded too.
    chain = "[g0]\nh[1:1000]\n" + "".join(f"[g{i}:children]\ng{i - 1}\n" for i in range(1, 250))
    assert f"would hold more than {MAX_MEMBERSHIPS:,} hosts" in _refused(tmp_path, "inventory", chain)


def test_host_patterns_expand_as_ansible_expands_them():
    assert expand("gpu[01:03]") == ["gpu01", "gpu02", "gpu03"]
    assert expand("db-[a:c]-[1:2]") == ["db-a-1", "db-a-2", "db-b-1", "db-b-2", "db-c-1", "db-c-2"]
    assert expand("n[1:9:4]") == ["n1", "n5", "n9"]
    assert expand("x[y:B]") == ["xy", "xz", "xA", "xB"]  # letters count a-z then A-Z, as in ansible-core
    assert expand("n[:2]") == ["n0", "n1", "n2"]
    assert hosts_of("gpu[01:02]:2222") == (["gpu01", "gpu02"], 2222)
    assert hosts_of("10.0.0.1:2200") == (["10.0.0.1"], 2200)
    assert hosts_of("fd00::1") == (["fd00::1"], None)
    assert hosts_of("[fd00::1]:2200") == (["fd00::1"], 2200)
    with pytest.raises(PatternError):
        hosts_of("gpu01:")


def test_values_cannot_end_their_comment_line(tmp_path):
    """A vars value with a newline, U+2028, NEL or DEL stays inside its comment: the output has no key
    the source did not make, and reads back as YAML."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(
        'evil: "x\\ncluster: {name: pwned}\\u2028hosts: {}\\x85y\\x7fz"\n"k\\ney": 1\n'
    )
    (tmp_path / "inventory").write_text("[gpu]\ngpu01 note='a\\nb'\n")
    out, _ = _import(tmp_path, tmp_path / "inventory")
    text = out.read_text()
    assert text.isascii()
    data = yaml.safe_load(text)
    assert data["cluster"] == {"name": tmp_path.name.lstrip("_.-") or "cluster", "ssh": data["cluster"]["ssh"]}
    assert set(data) == {"cluster", "hosts", "groups"}
    assert comment_text("a\u2028b\x7f") == "a\\u2028b\\x7f"
    assert '# ansible (group all): evil: "x\\ncluster: {name: pwned}\\u2028hosts: {}\\u0085y\\u007fz"' in text


def test_vars_trees_with_loops_or_odd_files_are_bounded(tmp_path):
    (tmp_path / "inventory").write_text("[gpu]\ngpu01\n")
    tree = tmp_path / "group_vars" / "gpu"
    tree.mkdir(parents=True)
    (tree / "a.yml").write_text("a: 1\n")
    os.symlink(tree, tree / "loop")  # a directory that contains itself
    os.mkfifo(tree / "pipe.yml")  # skipped: not a regular file, never opened
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu01.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n3131\n")
    out, proc = _import(tmp_path, tmp_path / "inventory")
    text = out.read_text()
    assert text.count("# ansible: a: 1") == 1
    assert "host_vars/gpu01.yml is encrypted with ansible-vault: not read" in text


def test_the_bounded_loader_reads_the_yaml_files(tmp_path):
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("\n".join(rows) + "\n")
    start = time.monotonic()
    stderr = _refused(tmp_path, "inventory", "[gpu]\ngpu01\n")
    assert time.monotonic() - start < 30
    assert "group_vars/all.yml" in stderr and "expands to more than" in stderr


# --- validate (and the commands that load an inventory) say what an Ansible inventory is ----------


@pytest.mark.parametrize("command", ["validate", "check", "apply", "verify", "facts"])
@pytest.mark.parametrize(("source", "kind"), [(DEEPOPS, "INI"), (YAML_INV, "YAML")])
def test_an_ansible_inventory_is_named_as_such_with_the_import_command(command, source, kind):
    proc = rdmaprov(command, str(source))
    assert proc.returncode == 1
    assert (
        f"{source}: this looks like an Ansible inventory ({kind}), not an rdmaprov inventory "
        f"(fix: import it: rdmaprov import ansible {source} -o inventory.yaml" in proc.stderr
    )
    assert "missing required key" not in proc.stderr and "<document start>" not in proc.stderr
    assert "unknown key 'ansible_host'" not in proc.stderr


def test_hint_for_other_ansible_shapes(tmp_path):
    hosts_only = tmp_path / "hosts"
    hosts_only.write_text("gpu01 ansible_host=10.0.0.1\ngpu02 ansible_host=10.0.0.2\n")
    assert "an Ansible inventory (INI)" in rdmaprov("validate", str(hosts_only)).stderr
    plugin = tmp_path / "inventory.aws_ec2.yml"
    plugin.write_text("plugin: amazon.aws.aws_ec2\n")
    assert "ansible-inventory -i" in rdmaprov("validate", str(plugin)).stderr
    ours = tmp_path / "ours.yaml"
    ours.write_text("cluster: {name: c}\nhosts:\n  gpu01: {ansible_host: 10.0.0.1}\n")
    stderr = rdmaprov("validate", str(ours)).stderr
    assert "unknown key 'ansible_host'" in stderr and "Ansible inventory" not in stderr  # an rdmaprov one


def test_importing_the_importers_own_output_says_it_is_not_ansible(tmp_path):
    out, _ = _import(tmp_path, DEEPOPS)
    stderr = _refused(tmp_path, "again.yaml", out.read_text())
    assert f"{tmp_path}/again.yaml: is an rdmaprov inventory already: there is nothing to import" in stderr


def test_import_without_the_cli_raises_user_errors_only(tmp_path):
    (tmp_path / "inventory").write_text("[gpu]\ngpu01 ansible_host=1.2.3.4 ansible_port=x\n")
    with pytest.raises(UserError) as info:
        import_ansible(tmp_path / "inventory")
    assert info.value.problems[0].line == 2
    shutil.rmtree(tmp_path)


def test_cluster_name_comes_from_the_first_name_that_says_something(tmp_path):
    deepops = tmp_path / "dgx-site" / "config"
    deepops.mkdir(parents=True)
    assert cluster_name(deepops / "inventory") == "dgx-site"
    assert cluster_name(tmp_path / "prod.ini") == "prod"
    assert cluster_name(tmp_path / "rack 7.yml") == "rack-7"


def test_a_key_file_that_is_no_private_key_is_the_users_to_fix(tmp_path):
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAAC3Nza test\n")
    stderr = _refused(tmp_path, "inventory", f"[gpu]\ngpu01 ansible_ssh_private_key_file={tmp_path}/id.pub\n")
    assert stderr == (
        f"{tmp_path}/inventory: cluster.ssh.key of the imported inventory: SSH key file {tmp_path}/id.pub is not a "
        "private key (fix: point it at the private half of the key pair (not the .pub file))"
    )
