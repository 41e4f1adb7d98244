"""The gates' launchers: the same workload as mpirun with a hostfile over SSH, or as srun with
Slurm's PMI; --gates-via and gates.via choose, and Slurm must be declared for srun."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rdmaprov.health.gates.all_reduce import workload
from rdmaprov.health.gates.launch import Job, Launcher, SlurmLauncher, launcher
from rdmaprov.inventory import load_inventory
from tests.conftest import rdmaprov
from tests.support.inventories import problems, write

INVENTORY = """cluster:
  name: lab
  gates: {{all_reduce: {{launcher_ifname: eth0, min_bytes: 1M, max_bytes: 4M}}{via}}}
{slurm}defaults:
  fabric: softroce
  rdma: {{netdevs: [eth0], devices: [rxe0]}}
  nccl: {{env: {{NCCL_IB_HCA: "=rxe0,rxe1", NCCL_SOCKET_IFNAME: eth0}}}}
hosts:
  node1: {{address: 10.79.41.11}}
  node2: {{address: 10.79.41.12}}
"""
SLURM = "  slurm: {enabled: true, controller: node1, node_names: {node2: n-2}}\n"


def _inventory(tmp_path, slurm: bool = True, via: str = ""):
    return write(tmp_path, INVENTORY.format(slurm=SLURM if slurm else "", via=f", via: {via}" if via else ""))


def _session(inventory):
    return SimpleNamespace(inventory=inventory)  # what the launchers read before they run anything


def test_with_slurm_declared_the_gates_are_slurm_jobs_unless_told_otherwise(tmp_path):
    inventory = load_inventory(_inventory(tmp_path))
    assert inventory.gates.via == "slurm"
    assert isinstance(launcher(_session(inventory)), SlurmLauncher)
    plain = load_inventory(_inventory(tmp_path, slurm=False))
    assert plain.gates.via == "ssh" and type(launcher(_session(plain))) is Launcher
    assert load_inventory(_inventory(tmp_path, via="ssh")).gates.via == "ssh"


def test_gates_via_slurm_without_slurm_is_refused(tmp_path):
    path = _inventory(tmp_path, slurm=False, via="slurm")
    [problem] = problems(path)
    assert "cluster.gates.via: gates.via is slurm but the inventory declares no Slurm" in problem
    proc = rdmaprov("verify", str(_inventory(tmp_path, slurm=False)), "--gates-via", "slurm")
    assert proc.returncode == 1 and "--gates-via slurm: the inventory declares no Slurm" in proc.stderr
    assert rdmaprov("verify", str(_inventory(tmp_path)), "--gates-via", "pbs").returncode == 64


def test_the_same_cpu_sweep_as_mpirun_with_a_hostfile_or_srun_with_pmix(tmp_path):
    inventory = load_inventory(_inventory(tmp_path))
    session = _session(inventory)
    job = workload(["node1", "node2"], session, 1, use_gpus=False)
    assert job.program == ["/opt/rdmaprov/probe/current/bin/allreduce_probe", "1048576", "4194304"]
    assert job.env["NCCL_ALGO"] == "Ring" and job.ranks == 2
    settings = inventory.gates.all_reduce
    ssh = Launcher(session).job_command(job, settings, 300)
    assert ssh.startswith(
        "mpirun --allow-run-as-root --hostfile /tmp/rdmaprov-allreduce-hosts -np 2 --npernode 1 --bind-to none "
        "--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "
    )
    assert "-x NCCL_IB_HCA==rxe0,rxe1" in ssh and ssh.endswith("-x PATH -x LD_LIBRARY_PATH " + " ".join(job.program))
    slurm = SlurmLauncher(session)
    srun = slurm.job_command(job, settings, 300)
    assert srun.startswith(
        "env OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=eth0 NCCL_IB_GID_INDEX=1 "
    )
    assert "NCCL_IB_HCA==rxe0,rxe1" in srun  # a comma in a value: in env, never in --export's list
    assert srun.endswith(
        f"srun --mpi=pmix --job-name=rdmaprov-all_reduce-{slurm.token} --nodes=2 --ntasks-per-node=1 --ntasks=2 "
        "--nodelist=node1,n-2 --exclusive --time=5 --immediate=60 " + " ".join(job.program)
    )


def test_gpu_workloads_ask_slurm_for_the_gpus(tmp_path):
    inventory = load_inventory(_inventory(tmp_path))
    session = _session(inventory)
    job = Job(["node1", "node2"], 8, {"NCCL_ALGO": "Ring"}, ["all_reduce_perf", "-g", "1"], 8)
    srun = SlurmLauncher(session).job_command(job, inventory.gates.all_reduce, 3600)
    assert (
        "--ntasks-per-node=8 --ntasks=16 --nodelist=node1,n-2 --exclusive --time=60 --immediate=60 --gres=gpu:8" in srun
    )
    slurm = SlurmLauncher(session)
    one = slurm.srun(["node2"], 61, "gate", 1, 4)
    assert one == [
        "srun",
        f"--job-name=rdmaprov-gate-{slurm.token}",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--ntasks=1",
        "--nodelist=n-2",
        "--exclusive",
        "--time=2",
        "--immediate=60",
        "--gres=gpu:4",
    ]


def test_a_hostile_value_stays_one_word_in_either_launch(tmp_path):
    inventory = load_inventory(_inventory(tmp_path))
    job = Job(["node1", "node2"], 1, {"NCCL_DEBUG_FILE": "/tmp/x $(id) `id`"}, ["probe"], 0)
    for launch in (Launcher(_session(inventory)), SlurmLauncher(_session(inventory))):
        assert "'NCCL_DEBUG_FILE=/tmp/x $(id) `id`'" in launch.job_command(job, inventory.gates.all_reduce, 60)


@pytest.mark.parametrize(
    "mpi, where",
    [
        ("{source: prefix, prefix: /opt/hpcx/ompi/}", "/opt/hpcx/ompi"),
        ("{source: archive, prefix: /opt/site-mpi, archive: {path: ompi.tar.gz}}", "/opt/site-mpi/current"),
    ],
)
def test_srun_ranks_find_a_site_mpis_libraries_and_each_run_names_its_own_jobs(tmp_path, mpi, where):
    text = INVENTORY.format(slurm=SLURM, via="").replace("defaults:\n", f"defaults:\n  mpi: {mpi}\n")
    (tmp_path / "ompi.tar.gz").write_bytes(b"")  # a command that connects needs the archive there
    inventory = load_inventory(write(tmp_path, text))
    session = _session(inventory)
    job = Job(["node1", "node2"], 1, {}, ["all_reduce_perf"], 0)
    srun = SlurmLauncher(session).job_command(job, inventory.gates.all_reduce, 60)
    # the ranks srun starts get the site MPI's place (OPAL_PREFIX: an archive built elsewhere is
    # relocated by it) and its lib ahead of what the node has
    env = f'OPAL_PREFIX={where} LD_LIBRARY_PATH={where}/lib"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
    assert srun.startswith(f"{env}env ")
    # mpirun is the site MPI's own, in the same environment (it hands OPAL_PREFIX to its daemons),
    # with --prefix for the nodes' non-interactive shells
    mpirun = Launcher(session).job_command(job, inventory.gates.all_reduce, 60)
    assert mpirun.startswith(f"{env}{where}/bin/mpirun --allow-run-as-root ")
    assert f"--prefix {where} " in mpirun
    # two runs at once never share a job name: stopping one's waiting srun leaves the other's
    assert SlurmLauncher(session).token != SlurmLauncher(session).token
