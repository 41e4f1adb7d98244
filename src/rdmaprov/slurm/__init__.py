"""Slurm: the cluster's configuration as rdmaprov renders it (slurm.conf, gres.conf, cgroup.conf),
the drain etiquette of the node check, and the commands that talk to Slurm from a node."""
