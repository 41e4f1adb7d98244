"""Ansible (and DeepOps) inventories, INI or YAML, with their group_vars/ and host_vars/, imported."""

from rdmaprov.importers.ansible.importer import ImportResult, import_ansible

__all__ = ["ImportResult", "import_ansible"]
