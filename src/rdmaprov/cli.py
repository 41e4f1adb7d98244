"""The `rdmaprov` command line: parse arguments, make one call per command, print, exit with a meaningful code."""

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console

from rdmaprov import __version__
from rdmaprov.errors import EXIT_INVALID, EXIT_USAGE, UserError
from rdmaprov.errors import UsageParser as _Parser
from rdmaprov.lab.releases import DEFAULT_NODES, DEFAULT_RELEASE, find_release
from rdmaprov.lab.releases import HELP as RELEASE_HELP
from rdmaprov.nodecheck.options import DESCRIPTION as NODE_CHECK_DESCRIPTION
from rdmaprov.nodecheck.options import add_arguments as add_node_check_arguments
from rdmaprov.report.output import print_json

if TYPE_CHECKING:  # imported by the commands that use it, after main() patched gevent
    from rdmaprov.lab.lab import Lab

# Commands that never open a connection: no gevent patching (it costs a fifth of a second).
_OFFLINE = {"validate", "import", "baseline", "node-check", "report"}
__all__ = ["EXIT_INVALID", "EXIT_USAGE", "build_parser", "main"]


def _cmd_validate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.inventory import load_inventory

    failed = False
    for path in args.inventory:
        try:
            inventory = load_inventory(path, require_files=False)
        except UserError as exc:
            failed = True
            for problem in exc.problems:
                err.print(problem.format(), markup=False, highlight=False)
            continue
        for warning in inventory.warnings:
            err.print(f"warning: {warning.format()}", markup=False, highlight=False)
        out.print(f"{path}: ok ({len(inventory.hosts)} hosts, {len(inventory.groups)} groups)", highlight=False)
    return EXIT_INVALID if failed else 0


def _cmd_import_ansible(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pathlib import Path

    from rdmaprov.importers.ansible import import_ansible
    from rdmaprov.importers.output import write_new

    result = import_ansible(args.file, name=args.name, known_hosts=args.known_hosts)
    for warning in result.warnings:
        err.print(f"warning: {warning.format()}", markup=False, highlight=False)
    if args.output:
        write_new(Path(args.output), result.text, args.force)
    else:
        sys.stdout.write(result.text)
    for note in result.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    target = args.output or "stdout"
    err.print(
        f"imported {result.hosts} hosts and {result.groups} groups into {target} (cluster {result.cluster}); "
        f"{result.kept_as_comments} Ansible variable{'' if result.kept_as_comments == 1 else 's'} kept as comments "
        "to translate by hand. Next: put every "
        f"node's host key in {args.known_hosts}, describe the RDMA hardware under defaults:, then run "
        f"`rdmaprov validate {args.output or 'FILE'}`.",
        markup=False,
        highlight=False,
    )
    return 0


def _selection(args: argparse.Namespace):
    """The inventory and the hosts --limit selects, with the libraries' logs as -v asks."""
    from rdmaprov.engine.pyinfra_state import quiet_libraries
    from rdmaprov.inventory import load_inventory
    from rdmaprov.inventory.limit import select_hosts

    inventory = load_inventory(args.inventory)
    hosts = select_hosts(inventory, args.limit)
    quiet_libraries(args.verbose)
    return _gates_via(inventory, getattr(args, "gates_via", None)), hosts


def _gates_via(inventory, via: str | None):
    """The inventory with the gates launched as --gates-via says (None: as the inventory says)."""
    from dataclasses import replace

    if via is None:
        return inventory
    if via == "slurm" and inventory.slurm is None:
        raise UserError("--gates-via slurm: the inventory declares no Slurm (enable cluster.slurm, or use ssh)")
    return replace(inventory, gates=replace(inventory.gates, via=via))


def _log_to(err: Console) -> Callable[[str], None]:
    """Progress messages of a long step, on stderr so that stdout stays the result (table or JSON)."""
    return lambda msg: err.print(msg, highlight=False)


def _converge_settings(args: argparse.Namespace):
    from rdmaprov.workflows.apply import ConvergeSettings
    from rdmaprov.workflows.rolling import parse_max_fail

    return ConvergeSettings(
        serial=args.serial,
        max_fail=parse_max_fail(args.max_fail),
        allow_reboot=args.allow_reboot,
        verify=not args.skip_verify,
        gates=not args.skip_gates,
        diagnose=not args.no_diagnose,
    )


def _cmd_apply(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.deploys import select_deploys
    from rdmaprov.engine import RunOptions
    from rdmaprov.report.progress import RichObserver
    from rdmaprov.workflows.apply import converge

    inventory, hosts = _selection(args)
    options = RunOptions(command="apply", hosts=hosts, deploys=select_deploys(args.tags))
    settings = _converge_settings(args)
    with RichObserver(err, verbose=args.verbose) as observer:
        result = converge(inventory, options, settings, log=_log_to(err), observer=observer)
    return _finish(result, args, out)


def _cmd_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.deploys import select_deploys
    from rdmaprov.report.progress import RichObserver
    from rdmaprov.workflows.check import drift_check

    inventory, hosts = _selection(args)
    with RichObserver(err, verbose=args.verbose) as observer:
        result = drift_check(
            inventory,
            hosts,
            select_deploys(args.tags),
            verify=not args.skip_verify,
            gates=args.gates,
            observer=observer,
            diagnose=not args.no_diagnose,
        )
    if args.textfile:
        from rdmaprov.report.textfile import render_metrics, write_textfile

        write_textfile(args.textfile, render_metrics(result))
    return _finish(result, args, out)


def _cmd_bootstrap(args: argparse.Namespace, out: Console, err: Console) -> int:
    import getpass

    from rdmaprov.report.progress import RichObserver
    from rdmaprov.workflows.bootstrap import bootstrap, with_password

    if not args.limit:
        raise UserError("bootstrap needs --limit: the new nodes to bring in (e.g. --limit gpu-new-01,gpu-new-02)")
    inventory, newcomers = _selection(args)
    if args.ask_pass:
        inventory = with_password(inventory, newcomers, getpass.getpass(f"SSH password for {', '.join(newcomers)}: "))
    with RichObserver(err, verbose=args.verbose) as observer:
        result = bootstrap(
            inventory, newcomers, _converge_settings(args), _log_to(err), observer, by_password=args.ask_pass
        )
    return _finish(result, args, out)


def _finish(result, args: argparse.Namespace, out: Console) -> int:
    """Print a run (table or JSON), write JUnit and the HTML report if asked, and return its exit code."""
    from rdmaprov.health.report import print_diagnosis, print_gates, print_gates_not_run, print_verify
    from rdmaprov.report.junit import junit_xml
    from rdmaprov.report.output import write_output
    from rdmaprov.report.tables import print_run

    if args.json:
        print_json(result.to_json())
    else:
        if result.hosts:
            print_run(result, out, show_diff=result.command == "check" or getattr(args, "diff", False))
        if result.verify is not None:
            print_verify(result.verify, out, verbose=args.verbose)
        if result.gates:
            print_gates(result.gates, out)
        print_gates_not_run(result.gates_not_run, out)
        if result.diagnosis is not None:
            out.print("a cluster gate failed: diagnosis (--no-diagnose to skip)", highlight=False)
            print_diagnosis(result.diagnosis, out)
        if result.verify is not None or result.gates or result.gates_not_run:
            out.print(f"exit {result.exit_code}", highlight=False)
    if getattr(args, "junit", None):
        write_output(args.junit, junit_xml(result.cluster, result.verify or [], result.gates or []), "JUnit XML")
    if args.report:
        from rdmaprov.report.html import write_report

        write_report(args.report, result.to_json())
    return result.exit_code


def _cmd_verify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.facts.node_report import DCGM_TIMEOUT_S
    from rdmaprov.workflows.verify import verify

    inventory, hosts = _selection(args)
    level = 3 if args.deep else 1
    if args.deep:
        gpu_nodes = [name for name in hosts if (gpu := inventory.hosts[name].node.gpu) and gpu.dcgm]
        err.print(
            f"verify --deep: DCGM's level 3 diagnostic on {len(gpu_nodes)} GPU node(s) at once, about 15 min "
            f"(stopped after {DCGM_TIMEOUT_S[3] // 60} min)",
            markup=False,
            highlight=False,
        )
    return _finish(
        verify(inventory, hosts, gates=args.gates, diagnose=not args.no_diagnose, dcgm_level=level), args, out
    )


def _cmd_facts(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.health.facts_report import read_facts
    from rdmaprov.health.report import print_facts

    inventory, hosts = _selection(args)
    facts = read_facts(inventory, hosts)
    if args.json:
        print_json(facts.to_json())
    else:
        print_facts(facts.reports, facts.unreachable, out)
    return facts.exit_code


def _cmd_status(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.report.status import print_status
    from rdmaprov.workflows.status import fleet_status

    inventory, hosts = _selection(args)
    result = fleet_status(inventory, hosts)
    if args.json:
        print_json(result.to_json())
    else:
        print_status(result, out, every=args.all)
    return result.exit_code


def _cmd_diagnose(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.health.report import print_diagnosis
    from rdmaprov.workflows.diagnose import diagnose

    inventory, hosts = _selection(args)
    diagnosis = diagnose(inventory, hosts)
    if args.json:
        print_json(diagnosis.to_json())
    else:
        print_diagnosis(diagnosis, out)
    if args.report:
        from rdmaprov.report.html import write_report

        write_report(args.report, diagnosis.to_json())
    return diagnosis.exit_code


def _cmd_report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.report.html import read_run, write_report

    write_report(args.output, read_run(args.run))
    out.print(f"{args.output}: the readiness report of {args.run}", markup=False, highlight=False)
    return 0


def _cmd_baseline(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.health.baselines import load_parts, reset_parts
    from rdmaprov.health.report import print_baselines
    from rdmaprov.inventory import load_inventory
    from rdmaprov.inventory.limit import select_hosts

    inventory = load_inventory(args.inventory, require_files=False)
    hosts = select_hosts(inventory, args.limit) if args.limit else None
    if args.reset:
        dropped = reset_parts(inventory.name, hosts)
        if args.json:
            print_json({"reset": dropped})
        else:
            whose = ", ".join(hosts) if hosts else "every node"
            out.print(
                f"reset {len(dropped)} baseline(s) of {whose}; the next gate runs record new ones", highlight=False
            )
        return 0
    parts = {
        key: part
        for key, part in load_parts(inventory.name).items()
        if hosts is None or set(part.get("hosts", [])) & set(hosts)
    }
    if args.json:
        print(json.dumps(parts, indent=2, sort_keys=True))
    else:
        print_baselines(parts, out)
    return 0


def _cmd_node_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.nodecheck.run import node_check

    return node_check(args)


def _lab(args: argparse.Namespace) -> "Lab":
    """The lab that --dir names, or the default one (where inventories/lab.yaml expects its keys)."""
    from pathlib import Path

    from rdmaprov.lab.lab import Lab
    from rdmaprov.lab.paths import default_lab_dir

    return Lab(Path(args.dir) if args.dir else default_lab_dir())


def _cmd_lab_up(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pathlib import Path

    from rdmaprov.lab.lab import DEFAULT_BRIDGE, DEFAULT_MEMORY_MB, DEFAULT_SUBNET, LabSettings, up
    from rdmaprov.lab.report import up_summary

    lab = _lab(args)
    if args.saved:
        given = [
            f"--{name}"
            for name in ("nodes", "release", "kind", "subnet", "bridge", "memory")
            if getattr(args, name) is not None
        ]
        if given:
            raise UserError(
                f"--from {args.saved} boots the saved nodes as they were saved: leave out {', '.join(given)}"
            )
    settings = LabSettings(
        nodes=args.nodes,
        release=args.release or DEFAULT_RELEASE.codename,
        kind=args.kind or "vm",
        subnet=args.subnet or DEFAULT_SUBNET,
        bridge=args.bridge or DEFAULT_BRIDGE,
        memory_mb=DEFAULT_MEMORY_MB if args.memory is None else args.memory,
        saved=Path(args.saved) if args.saved else None,
    )
    for line in up_summary(lab, up(lab, settings, log=_log_to(err))):
        out.print(line, highlight=False)
    return 0


def _cmd_lab_box(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.box import box_name, ensure_box

    release = find_release(args.release)
    box = ensure_box(release, log=_log_to(err))
    out.print(f"box: {box}", highlight=False)
    out.print(f"next: vagrant box add --name {box_name(release)} {box}", highlight=False)
    return 0


def _cmd_lab_mpi(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.mpi import ensure_mpi_archive

    archive = ensure_mpi_archive(log=_log_to(err))
    out.print(f"archive: {archive}", highlight=False)
    out.print(f"use it: mpi: {{source: archive, prefix: /opt/site-mpi, archive: {{path: {archive}}}}}", highlight=False)
    return 0


def _cmd_lab_vagrant_inventory(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pathlib import Path

    from rdmaprov.lab.vagrant import write_inventory

    inventory, known_hosts = write_inventory(Path(args.vagrant_dir), Path(args.output), args.netdev, log=_log_to(err))
    out.print(f"inventory: {inventory}  (host keys: {known_hosts})", highlight=False)
    out.print(f"next: rdmaprov apply {inventory}", highlight=False)
    return 0


def _cmd_lab_save(args: argparse.Namespace, out: Console, err: Console) -> int:
    from pathlib import Path

    from rdmaprov.lab.lab import save

    saved = save(_lab(args), Path(args.to), args.nodes)
    out.print(f"lab save: {', '.join(saved)} saved in {args.to}", highlight=False)
    out.print(f"next: rdmaprov lab --dir NEW_DIR up --from {args.to}", highlight=False)
    return 0


def _cmd_lab_down(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.lab import down
    from rdmaprov.lab.report import down_summary

    out.print(down_summary(down(_lab(args))), highlight=False)
    return 0


def _cmd_lab_status(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.lab import status
    from rdmaprov.lab.report import status_exit_code, status_table

    lab = _lab(args)
    rows = status(lab)
    if args.json:
        print_json(rows)
        return 0
    out.print(status_table(lab.dir, rows))
    return status_exit_code(rows)


def _cmd_lab_restart(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.lab import restart

    for name, how in restart(_lab(args), args.nodes).items():
        out.print(f"lab restart: {name} answering SSH again: {how}", highlight=False)
    return 0


def _cmd_lab_nic_watch(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.lab.nicwatch import watch

    watch(_lab(args), log=lambda line: print(line, flush=True))
    return 0


def _cmd_lab_ssh(args: argparse.Namespace, out: Console, err: Console) -> NoReturn:
    """Replace this process with ssh, so that the terminal and the remote exit status are the user's."""
    import os

    from rdmaprov.lab.lab import find_node, ssh_command

    lab = _lab(args)
    command = ssh_command(lab, find_node(lab, args.node), args.remote, tty=not args.remote and sys.stdin.isatty())
    os.execvp(command[0], command)


def _cmd_exporter(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rdmaprov.exporter.rdma_exporter import main as exporter_main

    return exporter_main(["--listen", args.listen, "--sysfs", args.sysfs])


# Options that several commands share are declared once, in parent parsers (argparse's `parents=`).
# Where commands explain a shared option differently, its parent is built once per explanation.

_RUN_EXIT_CODES = "Exit codes: 0 nothing to do, 2 changes, 4 failures, 6 both."
_LIMIT_HELP = "hosts, groups or globs (repeat or comma-separate)"


def _parent(*parents: _Parser) -> _Parser:
    """A parser that only lends options to commands: no -h of its own (each command has one)."""
    return _Parser(add_help=False, parents=list(parents))


def _flag(*flags: str, help_text: str | None = None) -> _Parser:
    """An on/off option as a parent, for the commands that share it."""
    parent = _parent()
    parent.add_argument(*flags, action="store_true", help=help_text)
    return parent


def _json_option(help_text: str | None = None) -> _Parser:
    return _flag("--json", help_text=help_text)


def _verbose_option(help_text: str | None = None) -> _Parser:
    return _flag("--verbose", "-v", help_text=help_text)


def _junit_option(help_text: str) -> _Parser:
    parent = _parent()
    parent.add_argument("--junit", metavar="PATH", help=help_text)
    return parent


def _report_option() -> _Parser:
    parent = _parent()
    parent.add_argument(
        "--report", metavar="PATH", help="write the readiness report, one self-contained HTML page (docs/report.md)"
    )
    return parent


def _gates_via_option() -> _Parser:
    parent = _parent()
    parent.add_argument(
        "--gates-via",
        choices=["ssh", "slurm"],
        help="launch the gates' workloads over SSH (mpirun with a hostfile) or as Slurm jobs (srun); "
        "default: slurm when the inventory declares Slurm, else ssh",
    )
    return parent


def _selection_options(limit_help: str | None = None) -> _Parser:
    """The inventory and --limit: which hosts a command reaches."""
    parent = _parent()
    parent.add_argument("inventory")
    parent.add_argument("--limit", "-l", action="append", metavar="PATTERN", help=limit_help)
    return parent


def _tags_option() -> _Parser:
    parent = _parent()
    parent.add_argument(
        "--tags", "-t", action="append", metavar="DEPLOY", help="run only these deploys (repeat or comma-separate)"
    )
    return parent


def _run_output_options() -> _Parser:
    """How apply, check and bootstrap report a run: one kind of result, so one set of options."""
    return _parent(
        _json_option("print the result as JSON (schemas/result.schema.json)"),
        _flag("--diff", help_text="show file diffs (always shown by check)"),
        _verbose_option("show every operation, pyinfra's log and paramiko's warnings"),
        _junit_option("write verification and gate results as JUnit XML"),
        _report_option(),
    )


def _no_diagnose_option() -> _Parser:
    return _flag(
        "--no-diagnose", help_text="when a cluster gate fails, do not run the diagnosis (pair rounds) after it"
    )


def _converge_options() -> _Parser:
    """How apply and bootstrap roll changes out (workflows/rolling.py): batches, reboots, what runs after."""
    parent = _parent(_no_diagnose_option())
    parent.add_argument("--skip-gates", action="store_true", help="verify after applying, but run no bandwidth gates")
    parent.add_argument("--skip-verify", action="store_true", help="neither verify nor gates after applying")
    parent.add_argument(
        "--allow-reboot",
        action="store_true",
        help="reboot hosts whose settings need it (netns mode), batch by batch, then verify them",
    )
    parent.add_argument(
        "--serial",
        metavar="N|P%",
        help="apply N hosts (or P%% of them) at a time, each batch verified before the next; "
        "also the reboot batch (default: all at once, reboots one at a time)",
    )
    parent.add_argument(
        "--max-fail",
        metavar="P%",
        help="stop when more than P%% of a batch's hosts fail (the rest are reported not run)",
    )
    return parent


def _add_run_command(sub: argparse._SubParsersAction, name: str, text: str, parents: list[_Parser]) -> _Parser:
    """A command that runs deploys: its one-line help, restated with the exit codes as its description."""
    return sub.add_parser(name, help=text, description=f"{text}. {_RUN_EXIT_CODES}", parents=parents)


def _add_lab_parser(sub: argparse._SubParsersAction) -> None:
    lab = sub.add_parser("lab", help="a local test cluster: QEMU VMs with SoftRoCE, or containers")
    lab.add_argument("--dir", help="lab state directory (default ~/.cache/rdmaprov/lab)")
    actions = lab.add_subparsers(dest="lab_command", required=True, metavar="ACTION", parser_class=_Parser)

    up = actions.add_parser(
        "up",
        help="build the image once, boot the nodes, write their inventory",
        description="Build each release's image once (cached), boot the nodes and write their inventory. "
        "Examples: `lab up` (2 Debian 12 VMs); `lab up --release trixie` (2 Debian 13 VMs); "
        "`lab up --release bookworm,trixie` (node1 Debian 12, node2 Debian 13); "
        "`lab up --release bookworm,bookworm,trixie` (3 nodes, node3 Debian 13).",
    )
    up.add_argument(
        "--nodes", type=int, help=f"how many nodes (default: one per release named in --release, else {DEFAULT_NODES})"
    )
    up.add_argument(
        "--release", metavar="RELEASE[,RELEASE...]", help=f"{RELEASE_HELP} (default {DEFAULT_RELEASE.codename})"
    )
    up.add_argument("--kind", choices=["vm", "container"], help="default vm")
    up.add_argument("--subnet", help="default 10.77.0.0/24")
    up.add_argument("--bridge", help="default rdmaprov0")
    up.add_argument("--memory", type=int, help="MiB per VM (default 1024)")
    up.add_argument(
        "--from",
        dest="saved",
        metavar="DIR",
        help="boot copies of the nodes `lab save` kept in DIR, as they were saved (their subnet and bridge too: "
        "where the lab they came from is up, in a network namespace of their own)",
    )
    up.set_defaults(handler=_cmd_lab_up)

    box = actions.add_parser(
        "box",
        help="make a Vagrant libvirt box of the lab image (no download needed)",
        description="Make a Vagrant libvirt box (box.img, metadata.json, Vagrantfile) of the lab's image: a vagrant "
        "user with passwordless sudo and Vagrant's insecure key, replaced at the first `vagrant up`. Cached; prints "
        "the `vagrant box add` line to run.",
    )
    box.add_argument(
        "--release", default=DEFAULT_RELEASE.codename, help="bookworm (12), trixie (13) or trixie-backports"
    )
    box.set_defaults(handler=_cmd_lab_box)

    mpi = actions.add_parser(
        "mpi",
        help="build one Open MPI here for nodes of mixed releases (mpi.source: archive)",
        description="Build Open MPI 4.1 once on this machine from Debian's source tarball and cache it as an "
        "archive for `mpi.source: archive`: every node then runs the same MPI, Debian 12 and 13 alike (their own "
        "Open MPI 4.1 and 5.0 cannot share a job). Takes a few minutes the first time; prints the archive's path.",
    )
    mpi.set_defaults(handler=_cmd_lab_mpi)

    vagrant = actions.add_parser(
        "vagrant-inventory",
        help="an inventory for the machines of a Vagrant project, their host keys pinned",
        description="Write an inventory for the running machines of a Vagrant project: how Vagrant reaches them "
        "(`vagrant ssh-config`), their host keys and private network read over `vagrant ssh` and pinned in a "
        "known_hosts file beside the inventory. Run it with the environment the machines were brought up with.",
    )
    vagrant.add_argument("--vagrant-dir", default=".", help="the Vagrant project (default: this directory)")
    vagrant.add_argument("-o", "--output", default="vagrant.yaml", help="inventory to write (default vagrant.yaml)")
    vagrant.add_argument(
        "--netdev", help="the cluster network's interface (default: the one private network each machine has)"
    )
    vagrant.set_defaults(handler=_cmd_lab_vagrant_inventory)
    _add_running_lab_actions(actions)


def _add_running_lab_actions(actions: argparse._SubParsersAction) -> None:
    """The lab actions on a lab that is up: look at it, get a silent VM going, log in, save it,
    take it down."""
    save = actions.add_parser(
        "save",
        help="keep VMs as they are now (their disks, addresses, keys) to boot copies with `lab up --from`",
        description="Copy each VM's disk (synced, its QEMU stopped for the copy, a second or two) with the lab's SSH "
        "and mirror keys into a new folder: `lab up --from DIR` boots copies of them as they are now, converged say, "
        "without converging again. A copy keeps the saved subnet and bridge.",
    )
    save.add_argument("--to", required=True, metavar="DIR", help="a new or empty folder")
    save.add_argument("nodes", nargs="*", metavar="NODE", help="the nodes to save (default: every node)")
    save.set_defaults(handler=_cmd_lab_save)

    down = actions.add_parser("down", help="stop every node and remove what the lab created")
    down.set_defaults(handler=_cmd_lab_down)

    status = actions.add_parser(
        "status", help="nodes, their PIDs, whether SSH answers, and why a silent VM is", parents=[_json_option()]
    )
    status.set_defaults(handler=_cmd_lab_status)

    restart = actions.add_parser(
        "restart",
        help="get VMs that stopped answering going again (resume a stalled NIC, else boot again on their own disks)",
        description="A VM whose QEMU stopped taking its NIC's transmits is paused and resumed (nothing is lost); any "
        "other is powered off and booted again on the same disk, address and host keys, so what it was converged to "
        "stays. `lab status` says which VM stopped answering and why.",
    )
    restart.add_argument("nodes", nargs="+", metavar="NODE")
    restart.set_defaults(handler=_cmd_lab_restart)

    watch = actions.add_parser(
        "nic-watch",
        help="resume any VM whose QEMU stopped taking its NIC's transmits, until the lab is down (up starts it)",
    )
    watch.set_defaults(handler=_cmd_lab_nic_watch)

    ssh = actions.add_parser("ssh", help="log into a node (or run a command there)")
    ssh.add_argument("node")
    ssh.add_argument("remote", nargs=argparse.REMAINDER)
    ssh.set_defaults(handler=_cmd_lab_ssh)


def _add_report_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser(
        "report",
        help="the readiness report of a run saved as JSON: one self-contained HTML page, as --report writes it",
        description="Make the page --report writes from a run's saved JSON (`rdmaprov verify INVENTORY --gates "
        "--json > RUN.json`; apply, check, bootstrap and diagnose take --json too). Exit codes: 0 written, 1 RUN.json "
        "is not a run's JSON or the page cannot be written.",
    )
    report.add_argument("run", metavar="RUN.json", help="a run's JSON, as --json printed it")
    report.add_argument("--output", "-o", metavar="PATH", required=True, help="the HTML page to write")
    report.set_defaults(handler=_cmd_report)


def _add_import_parser(sub: argparse._SubParsersAction) -> None:
    imports = sub.add_parser("import", help="make an rdmaprov inventory from another tool's inventory")
    formats = imports.add_subparsers(dest="import_format", required=True, metavar="FORMAT", parser_class=_Parser)
    ansible = formats.add_parser(
        "ansible",
        help="an Ansible or DeepOps inventory (INI or YAML, with group_vars/ and host_vars/ beside it)",
        description="Exit codes: 0 imported, 1 the inventory (or an option) cannot be imported as it is.",
    )
    ansible.add_argument("file", help="the Ansible inventory file (e.g. DeepOps' config/inventory)")
    ansible.add_argument("--output", "-o", metavar="OUT", help="write the inventory here (default: stdout)")
    ansible.add_argument(
        "--force", action="store_true", help="replace OUT if it exists (without it, an existing file is left alone)"
    )
    ansible.add_argument("--name", help="the cluster's name (default: from the file's name)")
    ansible.add_argument(
        "--known-hosts",
        metavar="PATH",
        default="~/.ssh/known_hosts",
        help="known_hosts file holding the nodes' host keys, written as cluster.ssh.known_hosts "
        "(default ~/.ssh/known_hosts)",
    )
    ansible.set_defaults(handler=_cmd_import_ansible)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rdmaprov", description="Provision and check RDMA GPU training clusters.")
    parser.add_argument("--version", action="version", version=f"rdmaprov {__version__}")
    # Subcommands (and theirs) are _Parser too, so that their usage errors also exit 64.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    via = _gates_via_option()

    validate = sub.add_parser("validate", help="check inventory files against the schema")
    validate.add_argument("inventory", nargs="+")
    validate.set_defaults(handler=_cmd_validate)

    _add_run_parsers(sub, via)
    _add_health_parsers(sub, via)
    _add_node_parsers(sub)
    _add_report_parser(sub)
    _add_import_parser(sub)
    _add_lab_parser(sub)
    return parser


def _add_run_parsers(sub, via: _Parser) -> None:
    """The commands that converge or plan: apply, check, bootstrap."""
    selection, tags, run_output = _selection_options(_LIMIT_HELP), _tags_option(), _run_output_options()
    converge = _converge_options()
    apply = _add_run_command(sub, "apply", "converge every selected node", [selection, tags, run_output, converge, via])
    apply.set_defaults(handler=_cmd_apply)

    check = _add_run_command(
        sub,
        "check",
        "report drift: what apply would change and which facts no longer hold, changing nothing",
        [selection, tags, run_output, _no_diagnose_option(), via],
    )
    check.add_argument("--gates", action="store_true", help="also run the bandwidth gates")
    check.add_argument(
        "--skip-verify", action="store_true", help="only plan: do not check the facts (ports, MTU, netns…)"
    )
    check.add_argument(
        "--textfile",
        metavar="PATH",
        help="write drift metrics for node_exporter's textfile collector "
        "(e.g. /var/lib/node_exporter/textfile/rdmaprov.prom)",
    )
    check.set_defaults(handler=_cmd_check)

    bootstrap = _add_run_command(
        sub,
        "bootstrap",
        "bring new nodes (--limit) into the cluster: full stack on them, SSH trust renewed on every node",
        [_selection_options(f"{_LIMIT_HELP}; for bootstrap: the new nodes"), run_output, converge, via],
    )
    bootstrap.add_argument(
        "--ask-pass",
        action="store_true",
        help="prompt once for the new nodes' SSH (and sudo) password; installs ssh.key's public half for later runs",
    )
    bootstrap.set_defaults(handler=_cmd_bootstrap)


def _add_health_parsers(sub, via: _Parser) -> None:
    """The commands that read and judge the nodes: verify, facts, diagnose, baseline."""
    verify = sub.add_parser(
        "verify",
        help="check every RDMA port and setting against the inventory (and run the gates)",
        description="Exit codes: 0 all checks pass, 4 a check or gate failed or a host was unreachable.",
        parents=[
            _selection_options(),
            _flag(
                "--gates",
                help_text="also run the gates "
                "(node, ib_write_bw pairs, container, rails, latency, all_reduce, workload)",
            ),
            _flag(
                "--deep",
                help_text="DCGM's level 3 diagnostic on GPU nodes (about 15 min) instead of level 1 (seconds)",
            ),
            _no_diagnose_option(),
            _json_option(),
            _junit_option("write the results as JUnit XML"),
            _report_option(),
            _verbose_option("show passing checks too"),
            via,
        ],
    )
    verify.set_defaults(handler=_cmd_verify)

    facts = sub.add_parser(
        "facts",
        help="RDMA devices, ports, GIDs, MTUs, netns mode, memlock, GPUs and NCCL of every node",
        parents=[_selection_options(), _json_option(), _verbose_option()],
    )
    facts.set_defaults(handler=_cmd_facts)

    status = sub.add_parser(
        "status",
        help="the fleet as the nodes' own checks left it in Slurm: one SSH session, however many nodes",
        description="Exit codes: 0 every node in service or drained by an admin, 4 a node drained by its check, "
        "not reporting or unknown to Slurm, or Slurm could not be read.",
        parents=[
            _selection_options(),
            _json_option("print every node's status as JSON"),
            _flag("--all", help_text="list healthy nodes too (by default they are counted)"),
            _verbose_option(),
        ],
    )
    status.set_defaults(handler=_cmd_status)

    diagnose = sub.add_parser(
        "diagnose",
        help="find the nodes that make the cluster slow: pair tests in two rounds, then the node gate",
        description="Exit codes: 0 every node cleared, 4 suspects, or nodes no test could clear.",
        parents=[
            _selection_options(),
            _json_option("print the diagnosis as JSON"),
            _report_option(),
            _verbose_option(),
            via,
        ],
    )
    diagnose.set_defaults(handler=_cmd_diagnose)

    baseline = sub.add_parser(
        "baseline",
        help="each gate figure's own baseline, kept on this machine; --reset starts a node's over",
        description="Exit codes: 0 done, 1 bad input.",
        parents=[_selection_options(_LIMIT_HELP), _json_option("print the baselines as JSON")],
    )
    baseline.add_argument(
        "--reset", action="store_true", help="forget the baselines of the --limit nodes (all without --limit)"
    )
    baseline.set_defaults(handler=_cmd_baseline)


def _add_node_parsers(sub) -> None:
    """The commands that run on a node itself: node-check, exporter."""
    node_check = sub.add_parser(
        "node-check",
        help="verify's per-node checks on this node, no SSH or inventory (what Slurm's HealthCheckProgram runs)",
        description=NODE_CHECK_DESCRIPTION,
    )
    add_node_check_arguments(node_check)
    node_check.set_defaults(handler=_cmd_node_check)

    exporter = sub.add_parser(
        "exporter", help="serve RDMA port state and counters for Prometheus (what the exporter deploy runs)"
    )
    exporter.add_argument("--listen", default="0.0.0.0:9879", help="ADDR:PORT (default 0.0.0.0:9879)")
    exporter.add_argument("--sysfs", default="/sys/class/infiniband", help=argparse.SUPPRESS)
    exporter.set_defaults(handler=_cmd_exporter)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in _OFFLINE:
        from gevent import monkey

        # pyinfra's SSH connections are greenlets: without patching, one host's I/O blocks every
        # other. Patched here, before any command's modules (pyinfra, paramiko) are imported.
        monkey.patch_all()
    # Piped output (logs, CI) gets wide tables instead of rich's 80-column default.
    # emoji off: a PCI address such as 0000:ab:00.0 holds ":ab:", which rich would draw as 🆎
    out = Console(soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, soft_wrap=True, emoji=False, width=None if sys.stderr.isatty() else 200)
    try:
        return args.handler(args, out, err)
    except UserError as exc:
        for problem in exc.problems:
            err.print(f"error: {problem.format()}", markup=False, highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted: the next apply converges whatever was left half-done")
        return 130


if __name__ == "__main__":
    sys.exit(main())
