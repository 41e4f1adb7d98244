"""Benchmark: `rdmaprov check` against `ansible-playbook --check` for the same desired state,
on the same converged lab containers (8 by default), in the same run.

The playbook is generated from what rdmaprov converged: the same packages, the same whole files
(copy) and the same managed blocks (blockinfile) in the same places. ansible-core comes from the
Python package index into bench/.venv-ansible; pipelining and ControlPersist are on, as Ansible
users tune it. Writes bench/results/vs_ansible.json. Needs root (the lab).

    .venv/bin/python bench/vs_ansible.py [--nodes 8] [--repeat 3] [--lab-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml
from common import (
    CONTAINER_TAGS,
    REPO,
    lab_down,
    lab_up,
    measure,
    median,
    rdmaprov,
    run_json,
    table,
    tool_venv,
    write_result,
)

sys.path.insert(0, str(REPO / "src"))
from rdmaprov.packages import RDMA_USERSPACE  # noqa: E402

WHOLE_FILES = [
    "/etc/apt/keyrings/rdmaprov-mirror.asc",
    "/etc/apt/sources.list.d/rdmaprov-mirror.list",
    "/etc/security/limits.d/90-rdmaprov-memlock.conf",
    "/etc/systemd/system.conf.d/90-rdmaprov-memlock.conf",
    "/etc/nccl.conf",
    "/etc/profile.d/nccl.sh",
]
BLOCK_FILES = ["/root/.ssh/authorized_keys", "/etc/ssh/ssh_known_hosts", "/etc/hosts"]


def ansible_playbook() -> Path:
    return tool_venv("ansible", "ansible-core", "ansible-playbook")


PYTHON_APT = ["python3-apt", "python-apt-common", "distro-info-data"]


def give_nodes_python_apt(lab_dir: Path, names: list[str], work: Path) -> None:
    """Ansible's apt module needs python3-apt on the node for --check, as its users install it:
    fetched once on this (Debian) machine, installed from the .debs on each node."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    if len(list(debs.glob("*.deb"))) < len(PYTHON_APT):
        subprocess.run(["apt-get", "download", *PYTHON_APT], cwd=debs, check=True, capture_output=True)
    bundle = work / "python-apt.tar"
    subprocess.run(["tar", "-cf", str(bundle), "-C", str(debs), "."], check=True)
    for name in names:
        with bundle.open("rb") as tar:
            proc = subprocess.run(
                rdmaprov(
                    "lab",
                    "--dir",
                    str(lab_dir),
                    "ssh",
                    name,
                    "--",
                    "mkdir -p /tmp/python-apt && tar -xf - -C /tmp/python-apt && dpkg -i /tmp/python-apt/*.deb "
                    ">/dev/null",
                ),
                cwd=REPO,
                stdin=tar,
                capture_output=True,
                text=True,
            )
        if proc.returncode != 0:
            raise SystemExit(f"installing python3-apt on {name} failed: {proc.stderr[-1000:]}")


def node_file(lab_dir: Path, node: str, path: str) -> str:
    proc = subprocess.run(
        rdmaprov("lab", "--dir", str(lab_dir), "ssh", node, "--", f"cat {path}"),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"cannot read {path} on {node}: {proc.stderr}")
    return proc.stdout


def block(text: str, cluster: str) -> str:
    begin, end = f"# BEGIN rdmaprov cluster {cluster} (managed by rdmaprov)", f"# END rdmaprov cluster {cluster}"
    lines = text.splitlines()
    return "\n".join(lines[lines.index(begin) + 1 : lines.index(end)])


def write_playbook(lab_dir: Path, work: Path, nodes: int) -> tuple[Path, Path, Path]:
    """The playbook, its inventory and ansible.cfg for the first `nodes` containers."""
    inventory = yaml.safe_load((lab_dir / "inventory.yaml").read_text())
    cluster = inventory["cluster"]["name"]
    ssh = inventory["cluster"]["ssh"]
    hosts = inventory["groups"]["nodes"]["hosts"]
    names = [f"node{i}" for i in range(1, nodes + 1)]
    tasks: list[dict] = [
        {"name": "RDMA userspace", "ansible.builtin.apt": {"name": RDMA_USERSPACE["debian"], "state": "present"}}
    ]
    for path in WHOLE_FILES:
        mode = "0600" if path.endswith("authorized_keys") else "0644"
        tasks.append(
            {
                "name": f"file {path}",
                "ansible.builtin.copy": {
                    "dest": path,
                    "content": node_file(lab_dir, "node1", path),
                    "mode": mode,
                    "owner": "root",
                    "group": "root",
                },
            }
        )
    tasks.append({"name": "SSH key pair exists", "ansible.builtin.stat": {"path": "/root/.ssh/id_ed25519"}})
    for path in BLOCK_FILES:
        tasks.append(
            {
                "name": f"block in {path}",
                "ansible.builtin.blockinfile": {
                    "path": path,
                    "block": block(node_file(lab_dir, "node1", path), cluster),
                    "marker": "{mark}",
                    "marker_begin": f"# BEGIN rdmaprov cluster {cluster} (managed by rdmaprov)",
                    "marker_end": f"# END rdmaprov cluster {cluster}",
                },
            }
        )
    work.mkdir(parents=True, exist_ok=True)
    playbook = work / "site.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "nodes", "gather_facts": False, "tasks": tasks}], sort_keys=False, width=1000)
    )
    ini = work / "hosts.ini"
    ini.write_text(
        "[nodes]\n"
        + "".join(f"{n} ansible_host={hosts[n]['address']}\n" for n in names)
        + f"[nodes:vars]\nansible_user={ssh['user']}\nansible_ssh_private_key_file={ssh['key']}\n"
        + "ansible_python_interpreter=/usr/bin/python3\n"
    )
    cfg = work / "ansible.cfg"
    cfg.write_text(
        "[defaults]\nforks = 50\nhost_key_checking = True\nstdout_callback = default\n"
        "[ssh_connection]\npipelining = True\nssh_args = -o ControlMaster=auto -o ControlPersist=60s -o "
        f"UserKnownHostsFile={ssh['known_hosts']}\n"
    )
    return playbook, ini, cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lab-dir", help="reuse a running container lab (e.g. from check_scaling.py --keep)")
    args = parser.parse_args()
    own = args.lab_dir is None
    lab_dir = Path(args.lab_dir or REPO / "bench" / ".lab-ansible")
    if own:
        lab_up(lab_dir, "container", args.nodes, "10.79.1.0/24", "rdbench1")
    inventory = str(lab_dir / "inventory.yaml")
    limit = ",".join(f"node{i}" for i in range(1, args.nodes + 1))
    try:
        ansible = ansible_playbook()
        measure(rdmaprov("apply", inventory, "--tags", CONTAINER_TAGS, "--skip-verify", "--limit", limit))
        work = REPO / "bench" / ".ansible-work"
        give_nodes_python_apt(lab_dir, limit.split(","), work)
        playbook, ini, cfg = write_playbook(lab_dir, work, args.nodes)
        env = {"ANSIBLE_CONFIG": str(cfg)}
        ours, theirs = [], []
        for _ in range(args.repeat):
            m = measure(
                rdmaprov("check", inventory, "--tags", CONTAINER_TAGS, "--skip-verify", "--limit", limit, "--json")
            )
            assert run_json(m)["exit_code"] == 0, "rdmaprov found drift on a converged lab"
            ours.append(m.wall_s)
            a = measure([str(ansible), "-i", str(ini), str(playbook), "--check"], env=env)
            recap = [line for line in a.stdout.splitlines() if "changed=" in line]
            if a.code != 0 or any("changed=0" not in line for line in recap) or len(recap) != args.nodes:
                raise SystemExit(
                    "ansible --check does not see the converged state as converged (exit "
                    f"{a.code}):\n{a.stdout[-3000:]}\n{a.stderr[-2000:]}"
                )
            theirs.append(a.wall_s)
        version = subprocess.run([str(ansible), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        rows = [
            ["rdmaprov check", f"{median(ours):.2f}", " ".join(f"{x:.2f}" for x in ours)],
            [
                f"ansible-playbook --check ({version.split('[')[-1].rstrip(']') if '[' in version else version})",
                f"{median(theirs):.2f}",
                " ".join(f"{x:.2f}" for x in theirs),
            ],
        ]
        print(table(["tool", "median s", "runs s"], rows))
        speedup = median(theirs) / median(ours)
        print(f"rdmaprov is {speedup:.1f}x faster than Ansible on {args.nodes} hosts (goal >= 3x)")
        path = write_result(
            "vs_ansible",
            {
                "nodes": args.nodes,
                "tasks": len(json.loads(json.dumps(yaml.safe_load(playbook.read_text())[0]["tasks"]))),
                "ansible_version": version,
                "rdmaprov_s": ours,
                "ansible_s": theirs,
                "speedup": round(speedup, 2),
            },
        )
        print(f"wrote {path}")
    finally:
        if own:
            lab_down(lab_dir)


if __name__ == "__main__":
    main()
