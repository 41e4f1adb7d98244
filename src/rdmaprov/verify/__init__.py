"""Verification: what the facts say against what the inventory declares."""
