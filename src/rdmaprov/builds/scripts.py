"""The shell scripts that build an artifact on the builder and install it on every node.

Pure functions of the BuildSpec, so the exact commands are testable and shown by `check`.
Both scripts work in temporary places and rename at the end: an interrupted build leaves no
archive, an interrupted install leaves the previous version current.
"""

from __future__ import annotations

from rdmaprov.builds.spec import ARTIFACT_DIR, MARKER, BuildSpec
from rdmaprov.quoting import fail_command, sh, sh_join

SOURCE_TARBALL = "source.tar"


def _checksum(spec: BuildSpec) -> list[str]:
    if not spec.source.sha256:
        return []
    setting = spec.source.setting or "the source"
    return [
        f"echo {sh(spec.source.sha256 + '  ' + SOURCE_TARBALL)} | sha256sum -c --quiet - || "
        + fail_command(f"{SOURCE_TARBALL} does not match the sha256 in {setting}", "fix the sha256 or the tarball")
    ]


def fetch_lines(spec: BuildSpec) -> list[str]:
    """Bring the source into ./src (the working directory is the build's workdir)."""
    source = spec.source
    setting = source.setting or "the build's source"
    if source.kind == "git":
        url, ref = sh(source.url), sh(source.ref)
        return [
            "git init -q src",
            f"git -C src fetch -q --depth 1 {url} {ref} || "
            + fail_command(
                f"cannot fetch {source.ref} from {source.url}",
                f"fix {setting} (url, ref), point it at a reachable mirror, or use a local tarball (kind file)",
            ),
            "git -C src checkout -q FETCH_HEAD",
        ]
    lines = []
    if source.kind == "url":
        url = sh(source.url)
        lines.append(
            f"curl -fsSL --retry 3 -o {SOURCE_TARBALL} {url} || "
            + fail_command(
                f"cannot download {source.url}",
                f"fix {setting}, point it at a reachable mirror, or use a local tarball (kind file)",
            )
        )
    if source.kind in ("url", "file"):
        lines += _checksum(spec)
        lines += ["mkdir -p src", f"tar -xf {SOURCE_TARBALL} -C src"]
    return lines


def build_script(spec: BuildSpec) -> str:
    """Fetch, build into $STAGE, pack and checksum; the archive appears only when all succeeded."""
    work = sh(spec.workdir)
    archive = sh(spec.archive)
    lines = [
        "set -e",
        f"mkdir -p {work} {ARTIFACT_DIR}",
        f"cd {work}",
        "rm -rf stage && mkdir -p stage",
        *fetch_lines(spec),
        "cd src",
        # A tarball usually holds one top directory (nccl-2.18.3-1/): build inside it.
        'set -- *; if [ $# -eq 1 ] && [ -d "$1" ]; then cd "$1"; fi',
        f'export STAGE={work}/stage JOBS="$(nproc)"',
        spec.script,
        f"tar -C {work}/stage -czf {ARTIFACT_DIR}/{archive}.tmp .",
        f"cd {ARTIFACT_DIR} && mv -f {archive}.tmp {archive} && sha256sum {archive} > {archive}.sha256.tmp && mv -f "
        f"{archive}.sha256.tmp {archive}.sha256",
        f"rm -rf {work}",
    ]
    return "\n".join(lines)


# How the receiving node tells the control machine why a copy failed (builds/fanout.py routes
# around the source either way).
UNREADABLE = 3  # the source could not be reached or read
DAMAGED = 4  # the copy does not match the archive's sha256
# Where Slurm's broadcast puts its copy on a node: a name of its own, so that a copy the node
# takes over SSH meanwhile (<archive>.part) is never written by both.
SBCAST_SUFFIX = ".sbcast"


def receive_script(
    spec: BuildSpec,
    sha256: str,
    source: str = "",
    address: str = "",
    user: str = "root",
    deadline: int = 600,
    sent_by: str = "the control machine",
    suffix: str = ".part",
) -> str:
    """On the receiving node: copy the archive from `source` (a node at `address`, over the
    cluster's SSH trust as `user`, within `deadline` seconds; none: `sent_by` has just put it
    there as <archive><suffix>), check it against `sha256`, and keep it with its checksum file.
    Exits UNREADABLE or DAMAGED, removing the copy, when it cannot be kept."""
    archive = sh(spec.archive)
    part = sh(f"{spec.archive}{suffix}")
    origin = source or sent_by
    lines = ["set -e", f"mkdir -p {ARTIFACT_DIR}", f"cd {ARTIFACT_DIR}"]
    if source:
        as_user = ["runuser", "-u", user, "--"] if user != "root" else []
        options = ["BatchMode=yes", "StrictHostKeyChecking=yes", "ConnectTimeout=10", "ServerAliveInterval=5"]
        ssh = sh_join(
            [*as_user, "ssh", *[w for o in options for w in ("-o", o)], address, f"cat {spec.remote_archive}"]
        )
        unreadable = sh(f"rdmaprov: cannot copy {spec.archive} from {source}")
        give_up = f"{{ rm -f {part}; echo {unreadable} >&2; exit {UNREADABLE}; }}"
        lines.append(f"timeout -k 5 {int(deadline)} {ssh} > {part} || {give_up}")
    damaged = sh(f"rdmaprov: the copy of {spec.archive} from {origin} is damaged")
    lines += [
        f"echo {sh(f'{sha256}  {spec.archive}{suffix}')} | sha256sum -c --quiet - >/dev/null 2>&1 || "
        f"{{ got=$(sha256sum {part} | cut -c1-16); rm -f {part}; "
        f"printf '%s (sha256 %s…, expected %s…)\\n' {damaged} \"$got\" {sha256[:16]} >&2; exit {DAMAGED}; }}",
        f"mv -f {part} {archive}",
        f"rm -f {sh(spec.archive + SBCAST_SUFFIX)}",  # a broadcast that came late: this copy is kept
        f"echo {sh(f'{sha256}  {spec.archive}')} > {archive}.sha256.tmp && mv -f {archive}.sha256.tmp {archive}.sha256",
    ]
    return "\n".join(lines)


def broadcast_script(
    spec: BuildSpec, nodes: list[str], partition: str, minutes: int, job_name: str, wait_s: int
) -> str:
    """On a node holding the archive: Slurm's own broadcast of it to `nodes` (their Slurm names, of
    `partition`) as <archive>.sbcast, inside one allocation of them that Slurm must grant within
    `wait_s` seconds. Each receiver then checks its copy's sha256 as any other."""
    source = f"{ARTIFACT_DIR}/{spec.archive}"
    inside = " && ".join(
        [
            sh_join(["srun", "--ntasks-per-node=1", "mkdir", "-p", ARTIFACT_DIR]),
            sh_join(["sbcast", "--force", source, f"{source}{SBCAST_SUFFIX}"]),
        ]
    )
    words = ["salloc", f"--job-name={job_name}", f"--partition={partition}", f"--nodes={len(nodes)}"]
    words += [f"--nodelist={','.join(nodes)}", f"--immediate={wait_s}", f"--time={minutes}", "--quiet"]
    return sh_join([*words, "sh", "-c", inside])


def install_script(spec: BuildSpec, keep_archive: bool) -> str:
    """Verify the archive's checksum, unpack it beside the others, switch `current` atomically."""
    prefix = sh(spec.prefix.rstrip("/"))
    name = sh(spec.dirname)
    archive = sh(spec.archive)
    temp = sh(f"{spec.prefix.rstrip('/')}/.{spec.dirname}.tmp")
    lines = [
        "set -e",
        f"cd {ARTIFACT_DIR}",
        f"sha256sum -c --quiet {archive}.sha256 || "
        + fail_command(f"{spec.archive} does not match its sha256", "rerun the apply (the archive is fetched again)"),
        f"rm -rf {temp} && mkdir -p {temp}",
        f"tar -xzf {archive} -C {temp}",
        f"echo \"{spec.key} $(cut -d' ' -f1 {archive}.sha256)\" > {temp}/{MARKER}",
        f"rm -rf {prefix}/{name} && mv {temp} {prefix}/{name}",
        switch_current(spec),
    ]
    if not keep_archive:
        lines.append(f"rm -f {archive} {archive}.sha256")
    if spec.after_install:
        lines.append(spec.after_install)
    return "\n".join(lines)


def switch_current(spec: BuildSpec) -> str:
    """Point <prefix>/current at this version in one rename (never a moment without it)."""
    prefix = sh(spec.prefix.rstrip("/"))
    return f"ln -sfn {sh(spec.dirname)} {prefix}/.current.tmp && mv -Tf {prefix}/.current.tmp {prefix}/current"
