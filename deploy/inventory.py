"""pyinfra inventory from an rdmaprov inventory, for running rdmaprov's deploys with plain pyinfra.

    RDMAPROV_INVENTORY=inventories/lab.yaml pyinfra deploy/inventory.py deploy/site.py

Same hosts, addresses, users, keys and pinned host keys as `rdmaprov apply`.
"""

import os

from rdmaprov.engine.pyinfra_state import connector_data
from rdmaprov.inventory import load_inventory

_inventory = load_inventory(os.environ.get("RDMAPROV_INVENTORY", "inventories/lab.yaml"))

# pyinfra reads every top-level list of hosts as a group; one group holds them all.
rdmaprov_nodes = [(name, connector_data(spec)) for name, spec in _inventory.hosts.items()]
