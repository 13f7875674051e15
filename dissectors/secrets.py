"""Secrets: values that never leave the process unless the user asks.

A decoded secret keeps its real value (the TUI hex view and `--show-secrets`
need it) but is wrapped in a marker type, so every output path can redact it
without knowing which field it came from.
"""

from __future__ import annotations

from dissectors.node import RAW, Node

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


# (api key, is_request) of bodies that carry credentials: SaslAuthenticate both ways, and every
# body with a SECRET_FIELDS field (delegation-token HMACs, SCRAM credential material). When one of
# them does not decode cleanly, where the secret sits is unknown: nothing of it is shown.
SECRET_BODIES = frozenset({
    (36, True), (36, False),  # SaslAuthenticate
    (38, False),  # CreateDelegationToken response: Hmac
    (39, True), (40, True),  # RenewDelegationToken / ExpireDelegationToken requests: Hmac
    (41, False),  # DescribeDelegationToken response: Hmac
    (51, True),  # AlterUserScramCredentials request: Salt, SaltedPassword
})


def _damaged(node: Node) -> bool:
    return any(n.diagnostics or n.kind == RAW for n in node.walk())


def withhold(node: Node) -> None:
    """Mark every bytes and text value under `node` secret, when the body is damaged: a short
    length, trailing bytes, an unknown tag or version, an internal error. A clean body keeps its
    field-level marking. Used by the decoder on `SECRET_BODIES`; the outputs then redact
    (`_trailing`, raw fallbacks, the TUI hex pane's spans) without knowing why."""
    if not _damaged(node):
        return
    for n in node.walk():
        _mark(n)


# What a frame swallowed by damage (a length run on over the next frames) shows when those were
# SASL: a SaslHandshake or SaslAuthenticate request header (api key 17 v0-1, 36 v0-2), a GS2
# header or an OAUTHBEARER attribute. Found in the undecoded bytes of a damaged body (unknown
# tags, trailing bytes, raw fallbacks), they withhold that body's bytes and text.
_SWALLOWED_SASL = (b"\x00\x11\x00\x00", b"\x00\x11\x00\x01", b"\x00\x24\x00\x00",
                   b"\x00\x24\x00\x01", b"\x00\x24\x00\x02", b"n,,", b"auth=")


def withhold_swallowed(node: Node) -> None:
    """`withhold` for a damaged body of any API whose undecoded bytes hold SASL frames (the
    mutation campaign: a damaged frame of another API ran on over a SaslAuthenticate)."""
    if _damaged(node) and any(_holds_sasl(n.value) for n in node.walk()):
        for n in node.walk():  # the whole body: where the secret ends is unknown
            _mark(n)


def _holds_sasl(v: object) -> bool:
    """Bytes values, and text: a string whose damaged length ran on over the SASL frames
    after it keeps their ASCII as it was (mutation seed 46 case 1894: a SaslHandshake
    mechanism holding a SaslAuthenticate frame and its PLAIN token)."""
    if is_secret(v):
        return False
    if isinstance(v, str):
        raw = v.encode("utf-8", "surrogatepass")
    elif isinstance(v, bytes | bytearray | memoryview):
        raw = bytes(v)
    else:
        return False
    return any(sig in raw for sig in _SWALLOWED_SASL)


def _mark(n: Node) -> None:
    v = n.value
    if isinstance(v, bytes | bytearray | memoryview) and not is_secret(v):
        n.value = SecretBytes(v)
    elif isinstance(v, str) and not is_secret(v):
        n.value = SecretStr(v)


def withheld_spans(node: Node) -> list[tuple[int, int]] | None:
    """Frame spans (offset, length) a hex view must mask; None: mask the whole body (a damaged
    body of `SECRET_BODIES` may hold the secret in bytes no node covers)."""
    if _damaged(node):
        return None
    return [(n.offset, n.length) for n in node.walk() if n.source == 0 and is_secret(n.value)]
