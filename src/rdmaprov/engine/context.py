"""What a deploy sees while it is planned for one host."""

from __future__ import annotations

from dataclasses import dataclass, field

from rdmaprov.inventory.config import NodeConfig
from rdmaprov.inventory.model import HostSpec, Inventory, resolve_path


@dataclass
class NodeContext:
    """The host being planned, the whole inventory (for cross-node settings) and a place for warnings."""

    host: HostSpec
    inventory: Inventory
    selected: list[str]
    warnings: list[str] = field(default_factory=list)
    # True while a deploy is planned here only to keep the operation sequence (bootstrap's
    # existing nodes): it must not claim work such as building an artifact.
    planned_only: bool = False

    @property
    def node(self) -> NodeConfig:
        return self.host.node

    def local_path(self, path: str) -> str:
        """A file on this machine named in the inventory: ~ expanded, relative to the inventory file."""
        return resolve_path(path, self.inventory.path.resolve().parent)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
