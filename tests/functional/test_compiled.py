"""The optional compiled build (tools/compile.py: mypyc, Cython) against the pure-Python modules.

The switch (`dissectors/native.py`) is tested everywhere; the identity of outputs only where
the hot modules are compiled (CI runs the suite in pure Python, then builds and runs this file
and tests/unit/records/test_record_text.py compiled: .ci/run). There, every
committed capture goes through every golden output mode once compiled and once with
KANALYZE_PURE=1, and the two must agree byte for byte (stdout, stderr, exit code, written
pcap).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dissectors import native
from kanalyze.capture import CaptureStats, Packet, read_captures
from kanalyze.engine import Engine

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KANALYZE_PURE"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _loaded(env: dict[str, str]) -> dict[str, str]:
    """The file each listed module loads from, in a fresh process that imports kanalyze first."""
    code = (
        "import importlib, json, kanalyze, dissectors.native as n; "
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in n.COMPILED}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, check=True
    )
    return json.loads(done.stdout)


def _fully_built() -> bool:
    return set(native.built()) == set(native.COMPILED) and not native.stale()


def test_pure_forced_loads_every_hot_module_from_source() -> None:
    files = _loaded(_env(KANALYZE_PURE="1"))
    assert set(files) == set(native.COMPILED)
    assert all(f.endswith(".py") for f in files.values()), files


def test_stale_build_and_forced_pure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.setattr(native, "COMPILED", ("pkg.hot", "pkg.cold"))
    (tmp_path / "pkg").mkdir()
    src, ext = native.source("pkg.hot"), native.extension("pkg.hot")
    src.write_text("x = 1\n")
    native.source("pkg.cold").write_text("y = 1\n")
    assert native.built() == [] and native.stale() == []
    ext.write_bytes(b"")
    os.utime(src, (1000, 1000))
    os.utime(ext, (2000, 2000))
    assert native.built() == ["pkg.hot"] and native.stale() == []
    os.utime(src, (3000, 3000))  # edited after the build
    assert native.stale() == ["pkg.hot"]
    monkeypatch.setenv("KANALYZE_PURE", "0")
    assert not native.pure_forced()
    monkeypatch.setenv("KANALYZE_PURE", "1")
    assert native.pure_forced()


PICKLED = [
    "lib_codecs.pcap",
    "replication/textbook.pcap",
    "crafted/out_of_order.pcap",
    "crafted/gap.pcap",
    "crafted/midstream.pcap",
    "lib_transactions.pcap",
]


def _packets(name: str) -> list[Packet]:
    return list(read_captures([str(ROOT / "captures" / name)], CaptureStats()))


@pytest.mark.parametrize("name", PICKLED)
def test_engine_pickled_mid_capture_goes_on_the_same(name: str) -> None:
    """Spark streaming pickles engines between micro-batches: compiled classes (connection
    state: framers, half-streams, correlators) must come back whole, as plain ones do."""
    packets = _packets(name)
    whole: list = []
    engine = Engine(whole.append)
    for pkt in packets:
        engine.feed(pkt)
    engine.close()
    assert whole

    out: list = []
    engine = Engine(out.append)
    half = len(packets) // 2
    for pkt in packets[:half]:
        engine.feed(pkt)
    assert engine.conns  # connections open at the cut
    engine, out = pickle.loads(pickle.dumps((engine, out), protocol=pickle.HIGHEST_PROTOCOL))
    for pkt in packets[half:]:
        engine.feed(pkt)
    engine.close()
    assert out == whole


@pytest.mark.skipif(not _fully_built(), reason="hot modules not compiled (tools/compile.py)")
def test_compiled_build_loads_from_any_directory(tmp_path: Path) -> None:
    """As a user runs it: the installed package, from a directory that is not the repo and
    without PYTHONPATH. The default editable install maps only the packages, so the group's
    shared library must sit inside one (it once sat at the repo root: ModuleNotFoundError)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KANALYZE_PURE", "PYTHONPATH")}
    code = (
        "import json, kanalyze, kanalyze.engine, kanalyze.parallel.range_engine as r; "
        "print(json.dumps([kanalyze.__file__, kanalyze.engine.__file__, r.__file__]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    if done.returncode != 0 and "No module named 'kanalyze'" in done.stderr:
        pytest.skip("kanalyze is not installed (pip install -e .)")
    assert done.returncode == 0, done.stderr[-2000:]
    package, engine, ranges = json.loads(done.stdout)
    if Path(package).resolve().parent.parent != ROOT:
        pytest.skip(f"the installed kanalyze is another checkout: {package}")
    assert engine.endswith(native.EXT) and ranges.endswith(native.EXT), (engine, ranges)


@pytest.mark.slow
@pytest.mark.skipif(not _fully_built(), reason="hot modules not compiled (tools/compile.py)")
def test_compiled_output_is_the_pure_output() -> None:
    files = _loaded(_env())
    assert all(not f.endswith(".py") for f in files.values()), files
    runs = {}
    procs = {
        mode: subprocess.Popen(
            [sys.executable, "-m", "tests.support.render"],
            env=_env(**extra),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for mode, extra in (("compiled", {}), ("pure", {"KANALYZE_PURE": "1"}))
    }
    for mode, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
        runs[mode] = json.loads(out)
    compiled, pure = runs["compiled"], runs["pure"]
    assert all(not f.endswith(".py") for f in compiled["modules"].values()), compiled["modules"]
    assert all(f.endswith(".py") for f in pure["modules"].values()), pure["modules"]
    # the record encoder (Cython) runs where it is built, never with KANALYZE_PURE
    assert compiled["encoder"] is native.cython_usable("dissectors.record_text")
    assert pure["encoder"] is False
    assert len(pure["outputs"]) >= 40 * 9
    differ = [k for k in pure["outputs"] if compiled["outputs"].get(k) != pure["outputs"][k]]
    assert not differ, f"{len(differ)} outputs differ, e.g. {differ[:5]}"
    assert compiled["outputs"].keys() == pure["outputs"].keys()
