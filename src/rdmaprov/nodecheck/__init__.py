"""`rdmaprov node-check`: verify's per-node checks, run on the node itself with no SSH and no
inventory, against the expectations file the node_check deploy renders from the inventory. It is
shipped to nodes as a self-contained zipapp (stdlib only) and is what Slurm's HealthCheckProgram
runs."""
