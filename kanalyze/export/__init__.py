"""Outputs: NDJSON exchanges and JSON documents. Only encoders live here: bodies are decoded
by `kanalyze.bodies`, JSON spelling is `kanalyze.jsontext`. Import from the package."""

from kanalyze.export.ndjson import SCHEMA_VERSION, ExchangeEncoder
from kanalyze.jsontext import dumps, ts_seconds

__all__ = ["SCHEMA_VERSION", "ExchangeEncoder", "dumps", "ts_seconds"]
