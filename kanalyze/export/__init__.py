"""Outputs: NDJSON exchanges and JSON documents."""
