"""Importers: inventories of other tools turned into rdmaprov inventories (`rdmaprov import ...`)."""
