"""`rdmaprov facts`: every selected node's report (the one verify judges, read across processes
when there are many hosts), with its JSON form and exit code decided here so that the command
line only prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rdmaprov.engine.results import EXIT_FAILURES, EXIT_OK
from rdmaprov.health.verify import read_reports_everywhere
from rdmaprov.inventory.model import Inventory
from rdmaprov.parsers.node import NodeReport


@dataclass
class FactsReport:
    """What was read from each reached host (or why it could not be), and who was not reached."""

    reports: dict[str, NodeReport | Exception]
    unreachable: dict[str, str]

    @property
    def exit_code(self) -> int:
        """4 when any host could not be reached or read: its facts are missing from the report."""
        failed = self.unreachable or any(isinstance(r, Exception) for r in self.reports.values())
        return EXIT_FAILURES if failed else EXIT_OK

    def to_json(self) -> dict[str, dict[str, object]]:
        """One entry per host: its report, {"error": why it could not be read} or {"unreachable": why}."""
        doc: dict[str, dict[str, object]] = {
            name: {"error": str(r)} if isinstance(r, Exception) else asdict(r) for name, r in self.reports.items()
        }
        doc.update({name: {"unreachable": reason} for name, reason in self.unreachable.items()})
        return doc


def read_facts(inventory: Inventory, hosts: list[str]) -> FactsReport:
    """Connect to `hosts`, read each one's report, and disconnect."""
    readings = read_reports_everywhere(inventory, hosts)
    return FactsReport(readings.values, readings.unreachable)
