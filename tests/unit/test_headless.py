"""The core never imports the heavy front ends (textual, pyspark, scapy)."""

from __future__ import annotations

import subprocess
import sys


def test_core_imports_are_headless():
    code = (
        "import sys, kanalyze.cli, kanalyze.engine, kanalyze.session, kanalyze.export, kanalyze.bodies, "
        "kanalyze.analysis.summary, dissectors.decoder, dissectors.records\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'pyspark', 'scapy'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
