"""The engine against real sshd hosts: apply, idempotence, drift, unreachable hosts, --limit, JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from rdmaprov.schemas import load_schema
from tests.conftest import rdmaprov, rdmaprov_json

pytestmark = pytest.mark.e2e

NCCL_DEFAULTS = """defaults:
  fabric: roce
  rdma:
    devices: [mlx5_0, mlx5_1]
    storage_hcas: [mlx5_2]
  nccl:
    env:
      NCCL_DEBUG: {debug}
      NCCL_SOCKET_IFNAME: eth0
"""


# The test hosts share this machine's packages and have no route out: run the file-only deploys.
TAGS = ("--tags", "limits,nccl_env")


def _inventory(farm, tmp_path, debug: str = "WARN"):
    return str(farm.inventory(tmp_path / "farm.yaml", NCCL_DEFAULTS.format(debug=debug)))


def _post(command: str) -> tuple[str, ...]:
    """These hosts have no RDMA: apply's verify and gates are proved on the lab VMs instead."""
    return ("--skip-verify",) if command in ("apply", "check") else ()


def run_json(command: str, inv: str, *args: str, timeout: int = 600):
    return rdmaprov_json(command, inv, *TAGS, *_post(command), *args, timeout=timeout)


def run(command: str, inv: str, *args: str):
    return rdmaprov(command, inv, *TAGS, *_post(command), *args)


def _ops(host: dict, status: str) -> list[str]:
    return [op["name"] for op in host["ops"] if op["status"] == status]


def test_apply_converges_then_reapply_changes_nothing(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path, debug="INFO")
    code, first = run_json("apply", inv)
    jsonschema.validate(first, load_schema("result"))
    assert code == 2, first
    assert [h["status"] for h in first["hosts"]] == ["changed"] * 3
    assert all("nccl_env | Write /etc/nccl.conf" in _ops(h, "changed") for h in first["hosts"])

    for host in ssh_farm.hosts:
        conf = ssh_farm.ssh(host, "cat /etc/nccl.conf").stdout
        assert "NCCL_DEBUG=INFO" in conf
        assert "NCCL_IB_HCA==mlx5_0,mlx5_1" in conf  # storage HCA mlx5_2 never given to NCCL
        assert "NCCL_IB_GID_INDEX=3" in conf  # RoCE v2 default
        limits = ssh_farm.ssh(host, "cat /etc/security/limits.d/90-rdmaprov-memlock.conf").stdout
        assert "hard memlock unlimited" in limits

    code, second = run_json("apply", inv)
    assert code == 0, second
    assert all(h["changed"] == 0 and h["status"] == "unchanged" for h in second["hosts"])


def test_check_reports_manual_edit_as_drift_with_diff(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path)
    assert run("apply", inv).returncode in (0, 2)
    edited = ssh_farm.hosts[1]
    ssh_farm.ssh(edited, "sed -i 's/NCCL_DEBUG=WARN/NCCL_DEBUG=TRACE/' /etc/nccl.conf")

    code, result = run_json("check", inv)
    jsonschema.validate(result, load_schema("result"))
    assert code == 2
    by_name = {h["name"]: h for h in result["hosts"]}
    assert by_name[edited.name]["status"] == "changed"
    drift = [op for op in by_name[edited.name]["ops"] if op["status"] == "would_change"]
    assert [op["name"] for op in drift] == ["nccl_env | Write /etc/nccl.conf"]
    assert drift[0]["drift"] == "corrective" and drift[0]["deploy"] == "nccl_env"  # the node moved, not the inventory
    assert by_name[edited.name]["last_applied"] and by_name[edited.name]["inputs_changed"] == []
    assert "-NCCL_DEBUG=TRACE" in drift[0]["diff"] and "+NCCL_DEBUG=WARN" in drift[0]["diff"]
    assert all(by_name[h.name]["status"] == "unchanged" for h in ssh_farm.hosts if h is not edited)
    # check changed nothing: the edit is still there
    assert "NCCL_DEBUG=TRACE" in ssh_farm.ssh(edited, "cat /etc/nccl.conf").stdout

    human = run("check", inv)
    assert human.returncode == 2
    assert f"{edited.name}: nccl_env | Write /etc/nccl.conf: would change (corrective)" in human.stdout
    assert "+NCCL_DEBUG=WARN" in human.stdout

    assert run("apply", inv).returncode == 2
    assert run("check", inv).returncode == 0


def test_enroot_containers_get_the_nodes_nccl_conf_and_the_mount_goes_when_turned_off(ssh_farm, tmp_path):
    """containers.enroot with no runtime of rdmaprov's: enroot's mount file on every node (a real
    enroot reading it ran by hand, docs/training-jobs.md), verify's finding that enroot itself is
    missing, nothing to change the second time, and the file gone once the inventory turns it off."""
    from rdmaprov.deploys.containers import ENROOT_FSTAB, ENROOT_MOUNTS

    tags = ("--tags", "nccl_env,containers", "--skip-verify")

    def applied(enroot: bool) -> tuple[int, dict]:
        settings = NCCL_DEFAULTS.format(debug="WARN") + f"  containers: {{enroot: {str(enroot).lower()}}}\n"
        return rdmaprov_json("apply", str(ssh_farm.inventory(tmp_path / "enroot.yaml", settings)), *tags)

    code, first = applied(True)
    assert code in (0, 2) and {h["status"] for h in first["hosts"]} <= {"changed", "unchanged"}, first["hosts"]
    for host in ssh_farm.hosts:
        assert ssh_farm.ssh(host, f"cat {ENROOT_MOUNTS}").stdout == ENROOT_FSTAB
    # these hosts have no enroot: verify's report reads so over SSH and says what to install
    _, verified = rdmaprov_json("verify", str(tmp_path / "enroot.yaml"))
    for host in verified["verify"]:
        [enroot] = [f for f in host["findings"] if f["id"] == "containers.enroot"]
        assert (enroot["ok"], enroot["found"]) == (False, "not installed") and "enroot+caps" in enroot["hint"], enroot
    code, again = applied(True)
    assert code == 0 and {h["status"] for h in again["hosts"]} == {"unchanged"}, again["hosts"]
    code, off = applied(False)
    assert code == 2 and all(
        "containers | NCCL settings in enroot containers" in _ops(h, "changed") for h in off["hosts"]
    )
    assert all(ssh_farm.ssh(host, f"test -e {ENROOT_MOUNTS}").returncode == 1 for host in ssh_farm.hosts)


def test_unreachable_host_is_reported_and_others_converge(ssh_farm, tmp_path):
    down = ssh_farm.hosts[2]
    inv = _inventory(ssh_farm, tmp_path, debug="VERSION")
    ssh_farm.stop_sshd(down)
    try:
        code, result = run_json("apply", inv, timeout=120)
    finally:
        ssh_farm.start_sshd(down)
    jsonschema.validate(result, load_schema("result"))
    assert code == 6  # changes on the live hosts, failure on the dead one
    by_name = {h["name"]: h for h in result["hosts"]}
    assert by_name[down.name]["status"] == "unreachable"
    assert by_name[down.name]["error"]
    for host in ssh_farm.hosts[:2]:
        assert by_name[host.name]["status"] == "changed"
        assert "NCCL_DEBUG=VERSION" in ssh_farm.ssh(host, "cat /etc/nccl.conf").stdout

    human = run("check", inv)
    assert human.returncode == 2  # the host is back and has not been converged yet
    assert down.name in human.stdout


def test_limit_selects_hosts_and_groups(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path, debug="ABORT")
    code, result = run_json("apply", inv, "--limit", "node1")
    assert code == 2
    assert [h["name"] for h in result["hosts"]] == ["node1"]
    assert "NCCL_DEBUG=ABORT" not in ssh_farm.ssh(ssh_farm.hosts[1], "cat /etc/nccl.conf").stdout

    code, result = run_json("check", inv, "--limit", "nodes")
    assert [h["name"] for h in result["hosts"]] == ["node1", "node2", "node3"]
    assert [h["status"] for h in result["hosts"]] == ["unchanged", "changed", "changed"]

    code, result = run_json("check", inv, "--limit", "node[23]")
    assert [h["name"] for h in result["hosts"]] == ["node2", "node3"]

    typo = run("check", inv, "--limit", "nod9")
    assert typo.returncode == 1
    assert "--limit 'nod9' matches no host or group" in typo.stderr


def test_wrong_host_key_is_refused(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path)
    bad_known = tmp_path / "known_hosts"
    lines = ssh_farm.known_hosts.read_text().splitlines()
    # node1's address pinned to node2's key: a man in the middle must be refused, not trusted
    key_of_2 = lines[1].split(" ", 1)[1]
    bad_known.write_text(f"{ssh_farm.hosts[0].address} {key_of_2}\n" + "\n".join(lines[1:]) + "\n")
    text = open(inv).read().replace(str(ssh_farm.known_hosts), str(bad_known))
    open(inv, "w").write(text)
    code, result = run_json("check", inv, "--limit", "node1")
    assert code == 4
    assert result["hosts"][0]["status"] == "unreachable"


def test_ssh_trust_between_nodes_pinned_and_revoked(ssh_farm, tmp_path):
    """Each node makes its own key; every node trusts and knows every other (no prompt, pinned host
    keys); a node removed from the inventory loses its access on the next apply."""
    inv = _inventory(ssh_farm, tmp_path)
    trust = ("--tags", "ssh_trust", "--skip-verify")
    code, first = rdmaprov_json("apply", inv, *trust)
    assert code == 2, first
    node1, node2, node3 = ssh_farm.hosts
    keys = {h.name: ssh_farm.ssh(h, "cat /root/.ssh/id_ed25519.pub").stdout.split()[1] for h in ssh_farm.hosts}
    assert len(set(keys.values())) == 3  # made on each node, never copied
    hop = "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes"
    for source, target in ((node1, node2), (node2, node3), (node3, node1)):
        for name in (target.name, target.address):
            proc = ssh_farm.ssh(source, f"{hop} {name} hostname")
            assert proc.returncode == 0 and proc.stdout.strip() == target.name, (source.name, name, proc.stderr)
    assert rdmaprov("apply", inv, *trust).returncode == 0  # converged

    # node3 leaves the inventory: node1 and node2 stop trusting it; keys others added stay.
    ssh_farm.ssh(
        node1,
        "echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorKeyOperatorKeyOperatorKey0000 ops@desk' >> "
        "/root/.ssh/authorized_keys",
    )
    text = Path(inv).read_text()
    smaller = tmp_path / "two.yaml"
    smaller.write_text(text.replace(f"      {node3.name}:\n        address: {node3.address}\n", ""))
    code, second = rdmaprov_json("apply", str(smaller), *trust)
    assert code == 2, second
    authorized = ssh_farm.ssh(node1, "cat /root/.ssh/authorized_keys").stdout
    assert keys[node3.name] not in authorized and keys[node2.name] in authorized and "ops@desk" in authorized
    assert node3.name not in ssh_farm.ssh(node1, "cat /etc/ssh/ssh_known_hosts").stdout
    refused = ssh_farm.ssh(node3, f"{hop} {node1.address} hostname")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr


def test_plain_pyinfra_runs_the_same_deploys(ssh_farm, tmp_path):
    """deploy/site.py with pyinfra's own CLI converges what `rdmaprov check` then finds in order."""
    import os
    import subprocess
    import sys

    inv = _inventory(ssh_farm, tmp_path, debug="TRACE")
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, RDMAPROV_INVENTORY=inv, RDMAPROV_TAGS="limits,nccl_env")
    pyinfra = Path(sys.executable).parent / "pyinfra"
    proc = subprocess.run(
        [str(pyinfra), "deploy/inventory.py", "deploy/site.py", "-y"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "NCCL_DEBUG=TRACE" in ssh_farm.ssh(ssh_farm.hosts[0], "cat /etc/nccl.conf").stdout
    code, result = run_json("check", inv)
    assert code == 0, [(h["name"], _ops(h, "would_change")) for h in result["hosts"]]


def test_check_tells_intentional_from_corrective_drift_and_writes_metrics(ssh_farm, tmp_path):
    """Each apply records what it applied on the node; a changed inventory is intentional drift,
    a node edited by hand is corrective; --textfile gives node_exporter both, per host."""
    inv = _inventory(ssh_farm, tmp_path, debug="WARN")
    assert run("apply", inv).returncode in (0, 2)
    record = json.loads(ssh_farm.ssh(ssh_farm.hosts[0], "cat /etc/rdmaprov/applied.json").stdout)
    assert "nccl_env | Write /etc/nccl.conf" in record["ops"] and record["inventory_sha256"]

    changed = _inventory(ssh_farm, tmp_path, debug="INFO")  # the inventory moves on
    ssh_farm.ssh(
        ssh_farm.hosts[2],
        "sed -i 's/hard memlock unlimited/hard memlock 64/' /etc/security/limits.d/90-rdmaprov-memlock.conf",
    )
    metrics = tmp_path / "textfile" / "rdmaprov.prom"
    code, result = run_json("check", changed, "--textfile", str(metrics))
    jsonschema.validate(result, load_schema("result"))
    assert code == 2
    by_name = {h["name"]: h for h in result["hosts"]}
    for host in ssh_farm.hosts:
        kinds = {op["deploy"]: op["drift"] for op in by_name[host.name]["ops"] if op["status"] == "would_change"}
        assert kinds.get("nccl_env") == "intentional", by_name[host.name]
        assert by_name[host.name]["inputs_changed"] == ["nccl_env"]
    node3_kinds = {op["deploy"]: op["drift"] for op in by_name["node3"]["ops"] if op["status"] == "would_change"}
    assert node3_kinds["limits"] == "corrective"
    text = metrics.read_text()
    assert 'rdmaprov_drift_operations{cluster="testfarm",host="node3",drift="corrective"} 1' in text
    assert (
        'rdmaprov_drift_operations{cluster="testfarm",host="node1",drift="intentional"} 2' in text
    )  # nccl.conf and its profile
    assert 'rdmaprov_drift_operations{cluster="testfarm",host="node1",drift="corrective"} 0' in text
    assert 'rdmaprov_check_exit_code{cluster="testfarm"} 2' in text

    human = run("check", changed)
    assert "inventory changed since the last apply" in human.stdout and "for: nccl_env" in human.stdout
    assert run("apply", changed).returncode == 2
    code, result = run_json("check", changed)
    assert code == 0 and all(h["inputs_changed"] == [] for h in result["hosts"])


def test_serial_applies_one_host_at_a_time_and_max_fail_stops(ssh_farm, tmp_path):
    inv = _inventory(ssh_farm, tmp_path, debug="TRACE")
    proc = run("apply", inv, "--serial", "1", "--json")
    assert proc.returncode == 2, proc.stderr
    result = json.loads(proc.stdout)
    assert [(h["name"], h["batch"], h["status"]) for h in result["hosts"]] == [
        ("node1", 1, "changed"),
        ("node2", 2, "changed"),
        ("node3", 3, "changed"),
    ]
    order = [line for line in proc.stderr.splitlines() if line.startswith("batch ")]
    assert order == ["batch 1/3: node1", "batch 2/3: node2", "batch 3/3: node3"]
    stamps = [
        json.loads(ssh_farm.ssh(h, "cat /etc/rdmaprov/applied.json").stdout)["applied_at"] for h in ssh_farm.hosts
    ]
    assert stamps == sorted(stamps)

    inv = _inventory(ssh_farm, tmp_path, debug="INFO")
    ssh_farm.stop_sshd(ssh_farm.hosts[0])
    try:
        code, result = run_json("apply", inv, "--serial", "1", "--max-fail", "0%", timeout=120)
    finally:
        ssh_farm.start_sshd(ssh_farm.hosts[0])
    jsonschema.validate(result, load_schema("result"))
    assert code == 4
    assert [h["status"] for h in result["hosts"]] == ["unreachable", "skipped", "skipped"]
    assert "over --max-fail 0%" in result["hosts"][1]["error"]
    assert "NCCL_DEBUG=INFO" not in ssh_farm.ssh(ssh_farm.hosts[1], "cat /etc/nccl.conf").stdout  # not touched

    bad = run("apply", inv, "--serial", "0")
    assert bad.returncode == 1 and "--serial 0: give a number of hosts" in bad.stderr


def test_batched_facts_give_the_same_check_in_fewer_round_trips(ssh_farm, tmp_path):
    """check reads the facts of all operations in one combined command per pass; its answers on
    a drifted cluster are exactly those of reading each fact on its own."""
    import os

    inv = _inventory(ssh_farm, tmp_path, debug="WARN")
    tags = ("--tags", "limits,nccl_env,ssh_trust", "--skip-verify")
    assert rdmaprov("apply", inv, *tags).returncode in (0, 2)
    ssh_farm.ssh(
        ssh_farm.hosts[1], "sed -i 's/NCCL_DEBUG=WARN/NCCL_DEBUG=TRACE/' /etc/nccl.conf; rm /etc/profile.d/nccl.sh"
    )
    ssh_farm.ssh(ssh_farm.hosts[2], "sed -i '/rdmaprov cluster/,$d' /etc/ssh/ssh_known_hosts")

    def check(batch: str) -> dict:
        os.environ["RDMAPROV_FACT_BATCH"] = batch
        try:
            return rdmaprov_json("check", inv, *tags)
        finally:
            del os.environ["RDMAPROV_FACT_BATCH"]

    (code_batched, batched), (code_single, single) = check("1"), check("0")
    assert code_batched == code_single == 2

    def answers(result: dict) -> list:
        return [
            (h["name"], h["status"], [(o["name"], o["status"], o["commands"], o["diff"], o["drift"]) for o in h["ops"]])
            for h in result["hosts"]
        ]

    assert answers(batched) == answers(single)
    trips = {h["name"]: h["round_trips"] for h in batched["hosts"]}
    assert trips["node1"] <= 3, trips  # converged: every fact in at most three combined reads
    assert all(b["round_trips"] < s["round_trips"] for b, s in zip(batched["hosts"], single["hosts"], strict=True)), (
        batched["hosts"],
        single["hosts"],
    )


def test_existing_nodes_run_only_ssh_trust_and_learn_the_new_node(ssh_farm, tmp_path):
    """What bootstrap relies on: in one run, node3 gets every deploy and node1/node2 only ssh_trust,
    executed in the same order (pyinfra matches operations across hosts by position, so the old
    nodes' trust must not run before node3 has made its key)."""
    from rdmaprov.deploys import STACK
    from rdmaprov.engine import RunOptions
    from rdmaprov.engine import run as run_engine
    from rdmaprov.inventory import load_inventory

    node1, node2, node3 = ssh_farm.hosts
    for host in ssh_farm.hosts:
        ssh_farm.ssh(
            host, "rm -f /root/.ssh/id_ed25519 /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys.rdmaprov-tmp"
        )
    inv = _inventory(ssh_farm, tmp_path)
    two = tmp_path / "two.yaml"
    two.write_text(Path(inv).read_text().replace(f"      {node3.name}:\n        address: {node3.address}\n", ""))
    first = run_engine(load_inventory(str(two)), RunOptions("apply", ["node1", "node2"], [STACK["ssh_trust"]]))
    assert [h.status for h in first.hosts] == ["changed", "changed"]

    stack = [STACK["limits"], STACK["nccl_env"], STACK["ssh_trust"]]
    result = run_engine(
        load_inventory(inv),
        RunOptions(
            "apply", ["node1", "node2", "node3"], stack, host_deploys={"node1": {"ssh_trust"}, "node2": {"ssh_trust"}}
        ),
    )
    hosts = {h.name: h for h in result.hosts}
    for old in ("node1", "node2"):
        assert {op.deploy for op in hosts[old].ops} == {"ssh_trust"}
        assert "ssh_trust | SSH trust: authorized_keys" in [op.name for op in hosts[old].ops if op.status == "changed"]
        assert hosts[old].warnings == []
    assert {op.deploy for op in hosts["node3"].ops} == {"limits", "nccl_env", "ssh_trust"}
    key3 = ssh_farm.ssh(node3, "cat /root/.ssh/id_ed25519.pub").stdout.split()[1]
    assert key3 in ssh_farm.ssh(node1, "cat /root/.ssh/authorized_keys").stdout
    assert (
        ssh_farm.ssh(
            node2, f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {node3.address} hostname"
        ).stdout.strip()
        == node3.name
    )


BUILD = """defaults:
  builds:
    - name: greet
      version: "{version}"
      source: {{kind: file, path: {tarball}}}
      build: 'mkdir -p "$STAGE/bin" && cc -O2 -o "$STAGE/bin/greet" greet.c'
"""


def _greet_tarball(tmp_path: Path, version: str) -> Path:
    """A real C program's source tarball, as a site would keep it for an air-gapped cluster."""
    src = tmp_path / f"greet-{version}"
    src.mkdir()
    (src / "greet.c").write_text(f'#include <stdio.h>\nint main(void) {{ puts("greet {version}"); return 0; }}\n')
    tarball = tmp_path / f"greet-{version}.tar.gz"
    subprocess.run(["tar", "-C", str(tmp_path), "-czf", str(tarball), src.name], check=True)
    return tarball


def _build_ops(result: dict, name: str) -> dict[str, dict[str, str]]:
    """{host: {step: status}} of one build's four operations."""
    return {
        h["name"]: {
            op["name"].split(f"build {name} ")[1]: op["status"] for op in h["ops"] if f"build {name} " in op["name"]
        }
        for h in result["hosts"]
    }


def test_a_build_is_compiled_once_shipped_verified_and_rebuilt_once_per_version(ssh_farm, tmp_path, artifact_store):
    inv = tmp_path / "builds.yaml"

    def apply(version: str) -> tuple[int, dict]:
        tarball = tmp_path / f"greet-{version}.tar.gz"
        ssh_farm.inventory(
            inv,
            BUILD.format(version=version, tarball=tarball if tarball.exists() else _greet_tarball(tmp_path, version)),
        )
        # without SSH trust between the nodes, the control machine sends the archive to each
        # (tests/e2e/test_fanout.py: nodes passing it on to each other)
        inv.write_text(
            inv.read_text().replace("  name: testfarm\n", "  name: testfarm\n  ssh_trust: {enabled: false}\n")
        )
        return rdmaprov_json("apply", str(inv), "--tags", "builds", "--skip-verify", "--skip-gates")

    code, first = apply("1.0")
    assert code == 2, first
    steps = _build_ops(first, "greet")
    # compiled on node1 only; its archive came to the control machine and went to node2 and node3
    # (no Slurm here: nothing is sent by it)
    fetched, sent = "fetched to the control machine", "sent by Slurm"
    assert steps["node1"] == {"built": "changed", fetched: "changed", sent: "unchanged", "installed": "changed"}
    assert (
        steps["node2"]
        == steps["node3"]
        == {"built": "unchanged", fetched: "unchanged", sent: "unchanged", "installed": "changed"}
    )
    for node in ("node2", "node3"):
        install = next(
            op
            for h in first["hosts"]
            if h["name"] == node
            for op in h["ops"]
            if op["name"] == "builds | build greet installed"
        )
        assert any(c.startswith("upload /var/cache/rdmaprov/artifacts/greet-1.0-") for c in install["commands"])
        assert "sha256sum -c --quiet" in install["commands"][-1]
    cached = sorted(p.name for p in artifact_store.glob("greet-1.0-*"))
    assert len(cached) == 2 and cached[1] == cached[0] + ".sha256"
    sha = (artifact_store / cached[1]).read_text().split()[0]
    for host in ssh_farm.hosts:
        assert ssh_farm.ssh(host, "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.0"
        assert ssh_farm.ssh(host, "cat /opt/greet/current/.rdmaprov-build").stdout.split()[1] == sha
    # only the builder compiled: nobody else has a build directory; each keeps its copy to pass on
    assert ssh_farm.ssh(ssh_farm.hosts[0], "ls /var/cache/rdmaprov/artifacts").stdout.split() == cached
    for other in ssh_farm.hosts[1:]:
        assert ssh_farm.ssh(
            other, "ls -A /var/cache/rdmaprov/artifacts; test -e /var/cache/rdmaprov/build || echo never-built"
        ).stdout.split() == [*cached, "never-built"]

    code, again = apply("1.0")
    assert code == 0 and all(h["changed"] == 0 for h in again["hosts"]), again

    code, bumped = apply("1.1")
    assert code == 2
    steps = _build_ops(bumped, "greet")
    assert [h for h, s in steps.items() if s["built"] == "changed"] == ["node1"]
    assert all(s["installed"] == "changed" for s in steps.values())
    for host in ssh_farm.hosts:
        assert ssh_farm.ssh(host, "/opt/greet/current/bin/greet").stdout.strip() == "greet 1.1"
        assert (
            len(ssh_farm.ssh(host, "ls -d /opt/greet/1.0-* /opt/greet/1.1-*").stdout.split()) == 2
        )  # the old version stays beside
    assert apply("1.1")[0] == 0

    # A damaged archive in the control machine's cache is refused by the node's checksum check.
    node3 = ssh_farm.hosts[2]
    ssh_farm.ssh(node3, "rm -rf /opt/greet/1.1-* /var/cache/rdmaprov/artifacts/greet-1.1-*")
    archive = next(p for p in artifact_store.glob("greet-1.1-*.tar.gz"))
    archive.write_bytes(archive.read_bytes()[:-10] + b"0123456789")
    code, damaged = apply("1.1")
    hosts = {h["name"]: h for h in damaged["hosts"]}
    assert code == 4 and hosts["node3"]["status"] == "failed"
    assert "does not match its sha256" in hosts["node3"]["error"], hosts["node3"]
    left = ssh_farm.ssh(node3, "ls -A /opt/greet").stdout.split()  # nothing half-installed: no 1.1 directory, no temp
    assert len(left) == 2 and left[0].startswith("1.0-") and left[1] == "current", left


def test_an_unreachable_build_source_fails_the_builder_and_the_others_say_why(ssh_farm, tmp_path):
    inv = ssh_farm.inventory(
        tmp_path / "bad.yaml",
        """defaults:
  builds:
    - name: unreachable
      version: "1"
      source: {kind: url, url: "http://127.0.0.1:9/unreachable-1.tar.gz"}
      build: make
""",
    )
    code, result = rdmaprov_json("apply", str(inv), "--tags", "builds", "--skip-verify", "--skip-gates")
    hosts = {h["name"]: h for h in result["hosts"]}
    assert code == 4 and {h["status"] for h in result["hosts"]} == {"failed"}
    assert hosts["node1"]["error"].startswith(
        "builds | build unreachable built failed: rdmaprov: node1 cannot fetch http://127.0.0.1:9/unreachable-1.tar.gz "
        "(curl: (7)"
    )
    assert "point it at a mirror the nodes reach, or use a local tarball (kind file)" in hosts["node1"]["error"]
    assert "its build on node1 failed or did not run" in hosts["node2"]["error"]
