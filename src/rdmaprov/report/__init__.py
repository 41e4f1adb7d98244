"""Rendering results for people (rich) and for machines (JSON)."""
