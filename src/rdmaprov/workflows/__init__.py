"""What a command does from start to end: apply (batches, reboots, verify, gates), check (drift),
bootstrap (new nodes in), built from the engine's runs and the health package's checks."""
