"""The rdmaprov node stack as a plain pyinfra deploy file (the `rdmaprov apply` deploys, no gates).

    RDMAPROV_INVENTORY=inventories/lab.yaml pyinfra deploy/inventory.py deploy/site.py
    RDMAPROV_TAGS=nccl_env,limits ... pyinfra deploy/inventory.py deploy/site.py   # some deploys

For teams that already drive pyinfra: rdmaprov's operations and deploys are ordinary pyinfra code.
Warnings and "reboot required" notes are printed as each host's operations finish.
`rdmaprov apply` adds parallel planning, per-host results, JSON, verify and the gates.
"""

import os

from pyinfra import host, state

from rdmaprov.deploys import select_deploys
from rdmaprov.engine.context import NodeContext
from rdmaprov.engine.notes import NotesPrinter
from rdmaprov.inventory import load_inventory

if not any(isinstance(handler, NotesPrinter) for handler in state.callback_handlers):
    state.add_callback_handler(NotesPrinter())
inventory = load_inventory(os.environ.get("RDMAPROV_INVENTORY", "inventories/lab.yaml"))
tags = [t for t in os.environ.get("RDMAPROV_TAGS", "").split(",") if t]
context = NodeContext(host=inventory.hosts[host.name], inventory=inventory, selected=list(inventory.hosts))
for deploy in select_deploys(tags or None):
    deploy(context)
for warning in context.warnings:
    print(f"{host.name}: warning: {warning}")
