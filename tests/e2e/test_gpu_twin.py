"""verify on sixteen DGX-shaped twin hosts (tests/support/twin.py): real SSH, real pyinfra, the
node report's real commands; the GPU, HCA and NVSwitch tools answer from real captured outputs
composed into 8 GPUs, 8 compute HCAs and 4 NVSwitches per host, one fault per faulty host.

What this proves is rdmaprov's reading of such a node, end to end; it is no proof that a real
DGX passes (that needs the hardware)."""

from __future__ import annotations

import json
import os
import resource
import shutil

import pytest

from tests.conftest import rdmaprov, rdmaprov_json
from tests.support.twin import DRIVER, FAULTS, TWIN_DEFAULTS, TwinNode, with_twin_gates

pytestmark = pytest.mark.e2e

# node1..node9 one fault verify sees each; node12's rail 4 slow, which only the gates can see
SEEN = [fault for fault, where in FAULTS.items() if where]
FAULTY = {f"node{index}": fault for index, fault in enumerate(SEEN, 1)} | {"node12": "slow_rail"}
HOSTS = 16

# The memlock a login gets on a twin is this machine's (the farm's sshd runs without PAM, and
# this machine gives no right to raise its hard limit): the one finding the test bed itself fails.
MEMLOCK = str(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] // 1024)


@pytest.fixture(scope="module")
def twin_farm():
    if os.geteuid() != 0:
        pytest.skip("twin hosts need root (network and mount namespaces)")
    from tests.support.sshhosts import SSHHostFarm

    def prepare(host) -> None:
        fault = FAULTY.get(host.name)
        TwinNode(frozenset({fault} if fault else ())).write(host.workdir)

    farm = SSHHostFarm(HOSTS, prepare=prepare).start()
    try:
        yield farm
    finally:
        farm.stop()


def test_verify_names_each_injected_fault_on_its_host_and_healthy_twins_are_green(twin_farm, tmp_path):
    inventory = str(twin_farm.inventory(tmp_path / "twin.yaml", TWIN_DEFAULTS))
    code, applied = rdmaprov_json("apply", inventory, "--tags", "nccl_env", "--skip-verify")
    # every twin gets its nccl.conf (the Slurm test below may have written it already)
    assert code in (0, 2) and applied["summary"]["failed"] == 0, applied["summary"]
    code, out = rdmaprov_json("verify", inventory)
    assert code == 4, json.dumps({k: v for k, v in out.items() if k != "verify"}, indent=1)[:6000]
    findings = [f for host in out["verify"] for f in host["findings"]]
    failed: dict[str, list[dict]] = {}
    for finding in findings:
        if finding["id"] == "limits.memlock_login" and finding["found"] in (MEMLOCK, "unlimited"):
            continue  # the test bed's own (above)
        if not finding["ok"]:
            failed.setdefault(finding["host"], []).append(finding)
    for host, fault in FAULTY.items():
        where = FAULTS[fault]
        if where is None:
            continue
        check, subject = where
        named = [f for f in failed.get(host, []) if f["id"] == check and f["subject"].startswith(subject)]
        assert named, f"{host} ({fault}): {failed.get(host)}"
        assert all(f["hint"] for f in failed[host]), failed[host]
    assert set(failed) == {h for h, fault in FAULTY.items() if FAULTS[fault]}, {
        h: [f["id"] for f in fs] for h, fs in failed.items()
    }
    # a healthy twin: every finding passes, none unknown, the fabric judged on every GPU
    healthy = [f for f in findings if f["host"] == "node16" and f["id"] != "limits.memlock_login"]
    assert healthy and all(f["ok"] and not f.get("unknown") for f in healthy), healthy
    per_gpu = {i: {f["subject"] for f in healthy if f["id"] == i} for i in ("gpu.fabric", "gpu.hca_affinity")}
    assert all(len(subjects) == 8 for subjects in per_gpu.values()), per_gpu
    found = {f["id"]: f["found"] for f in healthy}
    assert found["gpu.acs"] == "off on 24 switch ports" and found["gpu.iommu"] == "off"
    assert found["gpu.fabric_manager"] == f"active, {DRIVER}"
    assert found["gpu.dcgm_diag"] == "17 results passed (DCGM 3.1.0)"

    # the table people read names the GPU by its PCI address as it is (":ab:" is no emoji there)
    table = rdmaprov("verify", inventory, "--limit", "node2").stdout
    assert "gpu5 00000000:ab:00.0" in table and "memory row remapping" in table


def test_diagnose_names_the_node_with_the_slow_rail_and_the_rail(twin_farm, tmp_path):
    """Seven healthy-looking twins, node12's mlx5_4 at half its rate: the pair rounds test every
    rail, so the one slow HCA of eight fails its pair; round 2 clears its peer and names node12,
    and its rails against a cleared node name mlx5_4."""
    inventory = str(with_twin_gates(twin_farm.inventory(tmp_path / "twin.yaml", TWIN_DEFAULTS)))
    code, diagnosis = rdmaprov_json("diagnose", inventory, "--limit", ",".join(f"node{n}" for n in range(10, 17)))
    assert code == 4 and list(diagnosis["suspects"]) == ["node12"], diagnosis
    assert sorted(diagnosis["cleared"]) == sorted(f"node{n}" for n in (10, 11, 13, 14, 15, 16))
    evidence = " ".join(diagnosis["suspects"]["node12"])
    assert "node12:mlx5_4" in evidence and "every other rail of node12" in evidence, evidence


def test_node_check_under_slurm_drains_the_faulty_twins_within_the_share_and_resumes_them(twin_farm, tmp_path):
    """Slurm 22.05 on the sixteen twins (tests/support/twin_slurm.py), rdmaprov's node check as a
    site running its own Slurm installs it (mode health_check), each node's check run as slurmd
    runs its HealthCheckProgram. Nine twins carry a fault node-check sees; at most half the
    partition (8) may be drained by rdmaprov: node1..node8 drain, each with its fault as the reason,
    node9 is reported and left in service, the healthy seven and node12 (a slow rail: the gates'
    business) stay idle. With the faults repaired the next checks resume all eight."""
    from tests.support.twin_slurm import TwinSlurm

    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        pytest.skip("Debian's slurmctld, slurmd and munge are not installed (tools/setup.sh installs them)")
    slurm = TwinSlurm(twin_farm).start()
    try:
        health = "cluster:\n  slurm: {enabled: true, mode: health_check, health_check: {max_drain_fraction: 0.5}}\n"
        inventory = twin_farm.inventory(tmp_path / "twin.yaml", TWIN_DEFAULTS)
        inventory.write_text(inventory.read_text().replace("cluster:\n", health, 1))
        code, applied = rdmaprov_json("apply", str(inventory), "--tags", "nccl_env,node_check", "--skip-verify")
        assert code == 2, applied["summary"]
        for host in twin_farm.hosts:  # the one limit the test bed cannot give (see MEMLOCK above)
            bed = f'sed -i \'s/"memlock": "unlimited"/"memlock": {MEMLOCK}/\' /etc/rdmaprov/node-check.json'
            assert twin_farm.ssh(host, bed).returncode == 0

        def check_every_node() -> dict[str, str]:
            return {
                host.name: twin_farm.ssh(host, "/usr/local/sbin/rdmaprov-slurm-health-check 2>&1; echo exit=$?").stdout
                for host in twin_farm.hosts
            }

        said = check_every_node()
        seen = {host: fault for host, fault in FAULTY.items() if FAULTS[fault]}
        states = slurm.states()
        drained = {node for node, (state, _) in states.items() if state == "drained"}
        assert drained == {f"node{n}" for n in range(1, 9)}, (states, said)
        for node in sorted(drained):
            check, subject = FAULTS[seen[node]]
            assert states[node][1].startswith(f"rdmaprov: {check} {subject}"), (node, states[node], said[node])
        assert states["node9"] == ("idle", "none") and "exit=4" in said["node9"], said["node9"]
        share = "slurm: node9 fails, not drained: partition gpu has 8 of 16 nodes drained by rdmaprov (at most 8)"
        assert share in said["node9"] and said["node9"].startswith("gpu.iommu IOMMU: "), said["node9"]
        assert all(states[f"node{n}"] == ("idle", "none") for n in range(10, 17)), states
        assert all("exit=0" in said[f"node{n}"] for n in range(10, 17)), said

        # the faults repaired, as a node's outputs are after its repair: every node back in service
        for host in twin_farm.hosts:
            if host.name in seen:
                repaired = _lay_out(twin_farm, host, TwinNode(), TwinNode(frozenset({FAULTY[host.name]})))
                assert repaired.returncode == 0, repaired.stderr
        said = check_every_node()
        assert slurm.states() == {f"node{n}": ("idle", "none") for n in range(1, HOSTS + 1)}, said
    finally:
        slurm.stop()
        for host in twin_farm.hosts:  # each fault back for the module's other tests
            if host.name in FAULTY:
                _lay_out(twin_farm, host, TwinNode(frozenset({FAULTY[host.name]})), TwinNode())


def _lay_out(farm, host, twin: TwinNode, before: TwinNode):
    """Turn a running twin host laid out as `before` into `twin`: the files that differ, by SSH."""
    gone, files = twin.changes_from(before)
    return farm.send(host, f"rm -f {' '.join(gone)} && tar -x -C /", files)
