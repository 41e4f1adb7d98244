"""The typed reads of inventory settings (inventory/settings.py)."""

from __future__ import annotations

import pytest

from rdmaprov.inventory.settings import Section


def test_reads_give_the_values_as_written_with_their_types() -> None:
    rdma = Section.of({"port": 1, "rate_gbps": 400, "devices": ["mlx5_0", "mlx5_1"], "name": "x"}, ("rdma",))
    assert rdma.integer("port") == 1
    assert rdma.number("rate_gbps") == 400 and isinstance(rdma.number("rate_gbps"), int)  # prints as written
    assert rdma.texts("devices") == ("mlx5_0", "mlx5_1")
    assert rdma.optional_text("missing") is None and rdma.texts("missing") == ()
    assert rdma.optional_texts("missing") is None
    assert not rdma.section("missing") and rdma.section("missing").where == ("rdma", "missing")


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ({"port": "1"}, lambda s: s.integer("port"), "rdma.port: rdmaprov reads an integer there, not str"),
        ({"port": True}, lambda s: s.integer("port"), "rdma.port: rdmaprov reads an integer there, not bool"),
        ({"rate": True}, lambda s: s.number("rate"), "rdma.rate: rdmaprov reads a number there, not bool"),
        ({"on": "yes"}, lambda s: s.flag("on"), "rdma.on: rdmaprov reads true or false there, not str"),
        ({"devices": ["a", 3]}, lambda s: s.texts("devices"), "rdma.devices[1]: rdmaprov reads a string there"),
        ({"devices": "a"}, lambda s: s.texts("devices"), "rdma.devices: rdmaprov reads a list there, not str"),
        ({"cnp": [1]}, lambda s: s.section("cnp"), "rdma.cnp: rdmaprov reads a mapping there, not list"),
    ],
)
def test_a_value_of_another_type_names_the_setting(data: dict[str, object], read, message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read(Section.of(data, ("rdma",)))


def test_a_list_of_mappings_gives_each_its_place() -> None:
    partitions = Section.of({"partitions": [{"name": "a"}, {"name": "b"}]}, ("cluster", "slurm")).sections("partitions")
    assert [p.text("name") for p in partitions] == ["a", "b"]
    assert partitions[1].where == ("cluster", "slurm", "partitions", 1)
