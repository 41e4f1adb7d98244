"""Node and cluster health: the checks on each node's facts, the bandwidth gates, and the report
they make together. `verify`, `check` and the end of every apply all come through here."""
