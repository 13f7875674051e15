"""Issue 20: no credential in any output, damaged frames included.

SASL PLAIN / SCRAM / OAUTHBEARER tokens (headered and raw), delegation-token HMACs and SCRAM
credential upserts, each carrying a known secret, get random damage (bit flips, byte changes,
truncation, insertions, deletions, length-field changes); the secret -- raw, hex or base64 at any
alignment -- must not appear in `export`, `report` or `summary` (text and --json), nor in what the
TUI hex pane shows, unless --show-secrets.
"""

from __future__ import annotations

import base64
import contextlib
import io
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kanalyze.bodies import BodyDecoder
from kanalyze.cli import main as cli_main
from kanalyze.session import Session
from kanalyze.tui.widgets.decode_tree import hex_buffer
from tests.support import adversarial as A
from tests.support import packets as P
from tests.support.spec_encoder import encode_api

SECRET = b"S3cr3t-Pa55w0rd-xyzzy-42"  # printable: a damaged frame may decode it as text
TOKEN = b"eyJhbGciOi.Bearer-S3cr3t-t0ken"


def _s(b: bytes) -> bytes:
    return struct.pack(">h", len(b)) + b


def leak_forms(secret: bytes) -> list[str]:
    """The secret as it could show: raw text, hex (both cases), base64 at each alignment (only
    the characters that depend on the secret alone)."""
    forms = [secret.decode("latin-1"), secret.hex(), secret.hex().upper()]
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + secret).decode()
        lo, hi = -(-8 * k // 6), (8 * (k + len(secret))) // 6
        forms.append(enc[lo:hi])
    return forms


def _handshake(corr: int, v: int) -> list[tuple[bool, bytes]]:
    return [
        (True, P.request_frame(17, v, corr, "c", _s(b"PLAIN"))),
        (False, P.response_frame(corr, struct.pack(">hi", 0, 1) + _s(b"PLAIN"))),
    ]


def _auth(corr: int, v: int, token: bytes, reply: bytes = b"") -> list[tuple[bool, bytes]]:
    flex = v >= 2
    body = (
        (bytes([len(token) + 1]) + token + b"\0") if flex else struct.pack(">i", len(token)) + token
    )
    rbody = struct.pack(">hh", 0, -1)
    rbody += (bytes([len(reply) + 1]) + reply) if flex else struct.pack(">i", len(reply)) + reply
    rbody += struct.pack(">q", 0) if v >= 1 else b""
    rbody += b"\0" if flex else b""
    return [
        (True, P.request_frame(36, v, corr, "c", body, flexible=flex)),
        (False, P.response_frame(corr, rbody, flexible=flex)),
    ]


def _api(
    corr: int, api: int, v: int, req: dict, resp: dict, flex: bool = False
) -> list[tuple[bool, bytes]]:
    return [
        (True, P.request_frame(api, v, corr, "c", encode_api(api, v, True, req), flexible=flex)),
        (False, P.response_frame(corr, encode_api(api, v, False, resp), flexible=flex)),
    ]


def _token(hmac: bytes) -> dict:
    return {
        "PrincipalType": "User",
        "PrincipalName": "alice",
        "IssueTimestamp": 1,
        "ExpiryTimestamp": 2,
        "MaxTimestamp": 3,
        "TokenId": "tok-1",
        "Hmac": hmac,
        "Renewers": [],
    }


SCENARIOS: dict[str, tuple[list[tuple[bool, bytes]], bytes]] = {
    "plain_v0": (_handshake(1, 1) + _auth(2, 0, b"\0alice\0" + SECRET), SECRET),
    "plain_v2": (_handshake(1, 1) + _auth(2, 2, b"\0alice\0" + SECRET), SECRET),
    "scram_client_final": (
        _handshake(1, 1) + _auth(2, 1, b"c=biws,r=nonce123,p=" + SECRET),
        SECRET,
    ),
    "scram_server_final": (
        _handshake(1, 1) + _auth(2, 1, b"c=biws,r=n,p=x", b"v=" + SECRET),
        SECRET,
    ),
    "oauthbearer": (
        _handshake(1, 1) + _auth(2, 1, b"n,,\x01auth=Bearer " + TOKEN + b"\x01\x01"),
        TOKEN,
    ),
    "raw_plain": (
        _handshake(1, 0)
        + [
            (True, struct.pack(">i", 7 + len(SECRET)) + b"\0alice\0" + SECRET),
            (False, struct.pack(">i", 0)),
        ],
        SECRET,
    ),
    "create_token": (
        _api(
            1,
            38,
            1,
            {
                "OwnerPrincipalType": None,
                "OwnerPrincipalName": None,
                "Renewers": [],
                "MaxLifetimeMs": -1,
            },
            {
                "ErrorCode": 0,
                "PrincipalType": "User",
                "PrincipalName": "alice",
                "IssueTimestampMs": 1,
                "ExpiryTimestampMs": 2,
                "MaxTimestampMs": 3,
                "TokenId": "tok-1",
                "Hmac": SECRET,
                "ThrottleTimeMs": 0,
            },
        ),
        SECRET,
    ),
    "renew_token": (
        _api(
            1,
            39,
            1,
            {"Hmac": SECRET, "RenewPeriodMs": 1000},
            {"ErrorCode": 0, "ExpiryTimestampMs": 5, "ThrottleTimeMs": 0},
        ),
        SECRET,
    ),
    "expire_token": (
        _api(
            1,
            40,
            1,
            {"Hmac": SECRET, "ExpiryTimePeriodMs": 1000},
            {"ErrorCode": 0, "ExpiryTimestampMs": 5, "ThrottleTimeMs": 0},
        ),
        SECRET,
    ),
    "describe_tokens": (
        _api(
            1,
            41,
            1,
            {"Owners": None},
            {"ErrorCode": 0, "Tokens": [_token(SECRET)], "ThrottleTimeMs": 0},
        ),
        SECRET,
    ),
    "scram_upsert": (
        _api(
            1,
            51,
            0,
            {
                "Deletions": [],
                "Upsertions": [
                    {
                        "Name": "alice",
                        "Mechanism": 1,
                        "Iterations": 4096,
                        "Salt": b"salt-salt",
                        "SaltedPassword": SECRET,
                    }
                ],
            },
            {"ThrottleTimeMs": 0, "Results": []},
            flex=True,
        ),
        SECRET,
    ),
}


def damage(frame: bytes, ops: list[tuple[int, int, int]], keep: tuple[int, int] = (0, 0)) -> bytes:
    """Apply (kind, position, value) operations; positions are taken modulo the frame size and
    moved out of `keep` (a request's header: damage there makes the frame another API, or moves
    body bytes into the client id -- a known limit, docs/limits.md "Credentials")."""
    b = bytearray(frame)
    for kind, pos, val in ops:
        if not b:
            break
        i = pos % len(b)
        if keep[0] <= i < keep[1] + (7 if kind == 4 else 0):
            i = keep[1]
        if i >= len(b):
            continue
        if kind == 0:  # flip one bit
            b[i] ^= 1 << (val % 8)
        elif kind == 1:  # set one byte
            b[i] = val & 0xFF
        elif kind == 2:  # truncate (the length prefix still claims the full size)
            del b[max(i, 1) :]
        elif kind == 3:  # insert bytes
            b[i:i] = bytes([val & 0xFF]) * (1 + val % 5)
        elif kind == 4:  # delete a range
            del b[i : i + 1 + val % 8]
        elif kind == 5:  # a length field (int16 or int32 or varint byte) off by a little
            width = (2, 4, 1)[val % 3]
            if i + width <= len(b):
                n = int.from_bytes(b[i : i + width], "big", signed=True) + (val % 9) - 4
                with contextlib.suppress(OverflowError):
                    b[i : i + width] = n.to_bytes(width, "big", signed=True)
        elif kind == 6 and len(b) >= 4:  # fix the frame's length prefix to what is left
            struct.pack_into(">i", b, 0, len(b) - 4)
    return bytes(b)


def capture_of(frames: list[tuple[bool, bytes]]) -> bytes:
    return A.capture(frames)


def outputs(path: Path, show: bool = False) -> str:
    """Every CLI rendering of the capture, concatenated."""
    extra = ["--show-secrets"] if show else []
    out = []
    for argv in (
        ["export", *extra],
        ["report"],
        ["report", "--json"],
        ["summary"],
        ["summary", "--json"],
    ):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = cli_main([*argv, str(path)])
        assert rc == 0, (argv, buf.getvalue()[-2000:])
        out.append(buf.getvalue())
    return "\n".join(out)


def hex_panes(path: Path) -> bytes:
    dec = BodyDecoder()
    out = []
    for ex in Session([str(path)]).exchanges():
        for msg, is_req in ((ex.request, True), (ex.response, False)):
            if msg is not None:
                node, _ = dec.node(ex, msg, is_req)
                out.append(hex_buffer(ex, msg, is_req, node))
    return b"\n".join(out)


def assert_no_leak(path: Path, secret: bytes) -> None:
    text = outputs(path)
    for form in leak_forms(secret):
        assert form not in text, f"secret leaked as {form!r}"
    assert secret not in hex_panes(path), "secret bytes in the TUI hex pane"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_undamaged_secret_only_with_show_secrets(name: str, tmp_path: Path) -> None:
    """The detector works: --show-secrets shows the secret (raw or base64), the default does not."""
    frames, secret = SCENARIOS[name]
    path = tmp_path / "c.pcap"
    path.write_bytes(capture_of(frames))
    shown = outputs(path, show=True)
    assert any(f in shown for f in leak_forms(secret)), "the secret should show with --show-secrets"
    assert_no_leak(path, secret)


def test_short_auth_bytes_length_regression() -> None:
    """The audit's case: PLAIN password left over as `_trailing` (base64) after a too-short length."""
    path = Path(__file__).resolve().parents[1] / "data" / "bounded" / "sasl_plain_short_length.pcap"
    assert_no_leak(path, A.PLAIN_SECRET)


OPS = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 1 << 16), st.integers(0, 255)),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(name=st.sampled_from(sorted(SCENARIOS)), which=st.integers(0, 7), ops=OPS)
def test_damaged_frames_never_leak(name: str, which: int, ops: list[tuple[int, int, int]]) -> None:
    frames, secret = SCENARIOS[name]
    carrying = [i for i, (_c, f) in enumerate(frames) if secret in f]
    i = carrying[which % len(carrying)]
    frames = list(frames)
    from_client, frame = frames[i]
    if name.startswith("raw_"):
        keep = (0, 4)  # the token's length prefix
    elif from_client:
        keep = (0, 14 + int.from_bytes(frame[12:14], "big"))  # length, api, version, id, client id
    else:
        keep = (0, 0)
    frames[i] = (from_client, damage(frame, ops, keep))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.pcap"
        path.write_bytes(capture_of(frames))
        assert_no_leak(path, secret)


def test_a_damaged_length_pulling_the_next_token_in(tmp_path: Path) -> None:
    """Found by the mutation campaign: a SaslHandshake request whose length grew by the size of
    the SaslAuthenticate request after it swallows it; its `_trailing` held the password."""
    frames = _handshake(1, 1) + _auth(2, 0, b"\0alice\0" + SECRET)
    hs = bytearray(frames[0][1])
    struct.pack_into(">i", hs, 0, len(hs) - 4 + len(frames[2][1]))
    path = tmp_path / "c.pcap"
    path.write_bytes(capture_of([(True, bytes(hs)), frames[1], frames[2], frames[3]]))
    assert_no_leak(path, SECRET)
    assert any(f in outputs(path, show=True) for f in leak_forms(SECRET))  # it is in there
