"""Bandwidth gates: real traffic between the nodes, judged against thresholds."""
