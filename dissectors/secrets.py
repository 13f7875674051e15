"""Secrets: values that never leave the process unless the user asks.

A decoded secret keeps its real value (the TUI hex view and `--show-secrets`
need it) but is wrapped in a marker type, so every output path can redact it
without knowing which field it came from.
"""

from __future__ import annotations

# Fields whose values are secret wherever they appear in an API body
# (delegation-token HMACs, SCRAM credential material).
SECRET_FIELDS = frozenset({"Hmac", "SaltedPassword", "Salt"})


class SecretBytes(bytes):
    """bytes that are redacted in outputs by default."""

    __slots__ = ()


class SecretStr(str):
    """str that is redacted in outputs by default."""

    __slots__ = ()


def is_secret(value: object) -> bool:
    return isinstance(value, SecretBytes | SecretStr)


def redacted(value: SecretBytes | SecretStr) -> str:
    n = len(value) if isinstance(value, bytes) else len(value.encode())
    return f"<redacted {n} bytes>"
