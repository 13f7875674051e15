"""The committed schema modules are exactly what the generator makes from the specs."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT.parent / "shared" / "kafka-message-specs"
SETS = [SPECS / "apache-kafka-trunk-2024-10", SPECS / "apache-kafka-4.x-client"]
RECORD_SETS = [
    SPECS / "apache-kafka-trunk-2024-10-kraft-metadata",
    SPECS / "apache-kafka-trunk-2024-10-internal-topics",
]


@pytest.mark.skipif(
    not all(s.is_dir() for s in SETS + RECORD_SETS), reason="../shared specs not present"
)
def test_regenerated_schemas_match_committed(tmp_path: Path) -> None:
    out = tmp_path / "pkg" / "schemas"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "gen_schemas.py"),
            "--specs",
            *map(str, SETS),
            "--out",
            str(out),
            "--records",
            *map(str, RECORD_SETS),
        ],
        check=True,
        capture_output=True,
    )
    committed = ROOT / "dissectors" / "schemas"
    generated = sorted(p.name for p in out.glob("*.py"))
    assert generated == sorted(p.name for p in committed.glob("*.py"))
    for name in generated:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name
    assert filecmp.cmp(tmp_path / "pkg" / "apis.py", ROOT / "dissectors" / "apis.py", shallow=False)


@pytest.mark.skipif(not all(s.is_dir() for s in SETS), reason="../shared specs not present")
def test_generator_is_deterministic_and_covers_every_spec(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_schemas
    finally:
        sys.path.remove(str(ROOT / "tools"))
    first = gen_schemas.generate(SETS)
    assert first == gen_schemas.generate(SETS)
    # every API spec file of both sets is represented, every version of each
    from dissectors import apis

    for spec_dir in SETS:
        for path in spec_dir.glob("*Request.json"):
            spec = gen_schemas.load_spec(path)
            key = spec["apiKey"]
            lo, hi = gen_schemas.parse_range(spec["validVersions"])
            assert apis.REQUEST_VERSIONS[key][0] <= lo and hi <= apis.REQUEST_VERSIONS[key][1]
    # no upstream prose in the output
    assert not any('"about"' in text or "//" in text for text in first.values())


def test_api_table_shape() -> None:
    from dissectors import apis

    assert (
        apis.API_NAMES[0] == "Produce"
        and apis.API_NAMES[1] == "Fetch"
        and apis.API_NAMES[18] == "ApiVersions"
    )
    assert set(apis.API_NAMES) == set(range(88))
    assert apis.REQUEST_VERSIONS[0] == (0, 13)
    assert apis.REQUEST_VERSIONS[1] == (0, 18)
    assert apis.REQUEST_VERSIONS[3] == (0, 13)
    assert apis.REQUEST_FLEXIBLE_FROM[1] == 12 and apis.RESPONSE_FLEXIBLE_FROM[1] == 12
    assert apis.REQUEST_FLEXIBLE_FROM[17] is None  # SaslHandshake is never flexible
    assert apis.ApiKey.METADATA == 3 and apis.ApiKey["METADATA"] is apis.ApiKey(3)


def test_record_index_tables() -> None:
    """KRaft record types and internal-topic key versions index the generated record modules."""
    from dissectors import schemas

    assert schemas.METADATA_RECORDS[2] == "TopicRecord"
    assert schemas.METADATA_RECORDS[3] == "PartitionRecord"
    assert schemas.METADATA_RECORDS[5] == "PartitionChangeRecord"
    assert schemas.INTERNAL_KEYS["__consumer_offsets"][1] == "OffsetCommitKey"
    assert schemas.INTERNAL_KEYS["__consumer_offsets"][2] == "GroupMetadataKey"
    assert schemas.INTERNAL_KEYS["__transaction_state"] == {0: "TransactionLogKey"}
    offsets = schemas.INTERNAL_KEYS["__consumer_offsets"]
    for name in [*schemas.METADATA_RECORDS.values(), *offsets.values()]:
        assert name in schemas.MESSAGE_MODULES
