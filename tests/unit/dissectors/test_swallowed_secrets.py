"""A damaged frame of any API can run on over the SASL frames after it (mutation campaign seed
31 case 1868: a Vote v0 whose unknown tagged fields held a SaslAuthenticate frame): its
undecoded bytes that hold a SASL request header or token are withheld, with the whole body."""

from __future__ import annotations

import struct

from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import PRIM, RAW, STRUCT, Node
from dissectors.secrets import is_secret, withhold_swallowed

# a SaslAuthenticate v1 request as it follows a handshake: api 36, v1, corr 3, client "c",
# auth bytes of a PLAIN token
SASL_FRAME = (struct.pack(">ihhih", 0, 36, 1, 3, 1) + b"c"
              + struct.pack(">i", 13) + b"\x00alice\x00S3cr3t")


def _body(raw: bytes, damaged: bool) -> Node:
    tag = Node("52", RAW if damaged else PRIM, 9, len(raw), raw)  # a raw node is damage
    if damaged:
        tag.diagnostics.append(Diagnostic(Code.TRUNCATED, 9, "a tag runs past the frame"))
    name = Node("cluster_id", PRIM, 1, 6, "abcdef")
    return Node("body", STRUCT, 0, 9 + len(raw), None, [name, tag])


def test_a_damaged_body_holding_a_sasl_frame_is_withheld() -> None:
    body = _body(SASL_FRAME, damaged=True)
    withhold_swallowed(body)
    assert all(is_secret(n.value) for n in body.walk() if n.value is not None)


def test_other_damage_and_clean_bodies_are_shown() -> None:
    for body in (_body(b"\x00\x01\x02 plain damaged bytes", damaged=True),
                 _body(SASL_FRAME, damaged=False),  # clean: the field-level policy holds
                 _body(b"x-auth=token-looking text", damaged=False)):
        withhold_swallowed(body)
        assert not any(is_secret(n.value) for n in body.walk())


def test_tokens_without_a_frame_around_them() -> None:
    for token in (b"n,,\x01auth=Bearer eyJ.t0ken\x01\x01", b"n,,n=alice,r=nonce"):
        body = _body(b"\x00\x00" + token, damaged=True)
        withhold_swallowed(body)
        assert is_secret(body.children[1].value) and is_secret(body.children[0].value)


def test_a_string_that_ran_on_over_a_sasl_frame() -> None:
    """Mutation seed 46 case 1894: a SaslHandshake v1 request's mechanism, its length damaged,
    ran on over the SaslAuthenticate frames after it and decoded as text (invalid UTF-8,
    replaced): the PLAIN password was in the export."""
    text = ("\x00\x00\x01\x00\x01c\x00\x05PLAIN" + SASL_FRAME.decode("latin-1")
            + "\ufffd")
    mech = Node("mechanism", PRIM, 0, 400, text)
    mech.diagnostics.append(Diagnostic(Code.INVALID_UTF8, 2, "mechanism: invalid UTF-8"))
    body = Node("body", STRUCT, 0, 400, None, [mech])
    withhold_swallowed(body)
    assert is_secret(mech.value)
    plain = Node("mechanism", PRIM, 0, 7, "PLAIN")  # a clean handshake shows its mechanism
    clean = Node("body", STRUCT, 0, 7, None, [plain])
    withhold_swallowed(clean)
    assert not is_secret(plain.value)
