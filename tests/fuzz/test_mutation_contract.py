"""Issue 20: the output contract under damage -- a slice of the whole-program mutation campaign
(fuzz/mutate.py) run in-process: damaged real-client captures through export, report --json and
summary --json give no traceback, NDJSON lines and documents that validate against
docs/*.schema.json, whole byte accounting, and no credential."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import pytest

from fuzz import mutate as M

CASES = 40


@cache
def material() -> tuple[dict[str, bytes], list[str], tuple]:
    forms = [f for s in M.secret_capture()[1] for f in M.leak_forms(s)]
    return M.inputs(), forms, M._validators()


@pytest.mark.parametrize("n", range(CASES))
def test_mutated_capture_keeps_the_contract(n: int, tmp_path: Path) -> None:
    caps, forms, validators = material()
    name, data, done = M.build_case(caps, 2026, n)
    path = tmp_path / "m.pcap"
    path.write_bytes(data)
    found = M.run_case(str(path), forms if name == "sasl_secrets.pcap" else [], validators, 60.0)
    assert not found, (name, done, found)


def test_mutations_are_deterministic() -> None:
    caps = M.inputs()
    assert M.build_case(caps, 1, 5) == M.build_case(caps, 1, 5)
    _, data, done = M.build_case(caps, 1, 5)
    assert done and data != caps[M.build_case(caps, 1, 5)[0]]


def test_every_mutation_kind_changes_the_capture() -> None:
    cap = M.inputs()["lib_acks.pcap"]
    for kind in M.MUTATIONS:  # a kind needing a payload skips a packet without one: try seeds
        results = [M.mutate(cap, _Fixed(random.Random(f"{kind}{i}"), kind)) for i in range(20)]
        assert any(done == [kind] and out != cap for out, done in results), kind


class _Fixed(random.Random):
    """A Random that always picks one mutation, once."""

    def __init__(self, rng: random.Random, kind: str) -> None:
        super().__init__(rng.random())
        self.kind = kind

    def randint(self, a: int, b: int) -> int:
        return 1 if (a, b) == (1, 3) else super().randint(a, b)

    def choice(self, seq):  # type: ignore[override]
        return self.kind if seq is M.MUTATIONS else super().choice(seq)
