"""Real-client captures: every body the engine hands us decodes without a diagnostic.

Documented exception (the decoder is right, the client sends extra bytes):
- librdkafka's AdminClient sends a Metadata v12 request whose 7-byte body is the
  v8-10 layout (int32 topic count 0, AllowAutoTopicCreation true, two bools);
  read as v12 it is a null topic list, two bools, an empty tag section and 3
  trailing bytes. Brokers ignore trailing request bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
KNOWN = {
    # librdkafka's Metadata v12 carries 3 bytes more than the spec (tests/functional/
    # test_real_captures.py KNOWN_CLIENT_DEVIATIONS): its admin client and kcat -L
    ("admin.pcap", "Metadata", 12, "request", "trailing_bytes"),
    ("kcat_tool.pcap", "Metadata", 12, "request", "trailing_bytes"),
    # tansu's ListOffsets v0 response lacks the offsets array
    ("kn_legacy.pcap", "ListOffsets", 0, "response", "truncated"),
}


@pytest.mark.skipif(not CAPTURES, reason="no captures in the checkout")
@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_capture_bodies_decode_cleanly(path: Path) -> None:
    engine_mods = pytest.importorskip("kanalyze.session")
    from dissectors.context import DecodeContext
    from kanalyze.export import ExchangeEncoder

    encoder = ExchangeEncoder(DecodeContext(strict=True))
    found = set()
    decoded = 0
    for ex in engine_mods.Session([str(path)]).exchanges():
        for msg, side in ((ex.request, "request"), (ex.response, "response")):
            if msg is None:
                continue
            node, _ = encoder.bodies.node(ex, msg, side == "request")
            if node is None:
                continue
            decoded += 1
            for n in node.walk():
                for d in n.diagnostics:
                    found.add((path.name, ex.api, ex.api_version, side, str(d.code)))
    assert decoded > 0
    assert found <= KNOWN
