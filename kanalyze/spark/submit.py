"""The spark-submit recipe: a Python entry script, and kanalyze packed for the executors.

`spark-submit $(command -v kanalyze)` cannot work: the console script has no `.py` suffix, so
spark-submit takes it for a JAR ("Failed to get main class in JAR"). Instead::

    python -m kanalyze.spark.submit dist/spark          # writes the two files below, prints:
    spark-submit --master spark://host:7077 \\
        --py-files dist/spark/kanalyze-pyfiles.zip \\
        dist/spark/kanalyze_spark_submit.py PATH... --out DIR [kanalyze spark options]

* `kanalyze-pyfiles.zip` holds the packages `kanalyze` and `dissectors` and the Data Source hook
  `pyspark_kafka_pcap` (pure Python, imported from the zip by the driver and every executor);
* `kanalyze_spark_submit.py` runs `kanalyze spark` with the arguments after it, keeping the
  master, deploy mode and configuration that spark-submit was given (the Spark UI stays on).

Kanalyze's third-party dependencies (compiled: crc32c, lz4, zstandard, orjson, ...) cannot run
from a zip: install them on every node, or ship a packed virtual environment with `--archives`
(docs/spark.md).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import zipfile
from pathlib import Path

ZIP_NAME = "kanalyze-pyfiles.zip"
ENTRY_NAME = "kanalyze_spark_submit.py"
ENTRY = '''"""spark-submit entry for `kanalyze spark`, written by `python -m kanalyze.spark.submit`:
spark-submit ... --py-files kanalyze-pyfiles.zip kanalyze_spark_submit.py PATH... --out DIR"""

import sys

from kanalyze.spark.submit import main

sys.exit(main(sys.argv[1:]))
'''


def main(argv: list[str]) -> int:
    """`kanalyze spark ARGV` inside spark-submit: the submitted master is kept (`--master` may
    still override it)."""
    from kanalyze.cli import main as cli_main

    return cli_main(["spark", *argv])


def _package_roots() -> list[Path]:
    import dissectors
    import kanalyze
    import pyspark_kafka_pcap

    return [
        Path(kanalyze.__path__[0]),
        Path(dissectors.__path__[0]),
        Path(pyspark_kafka_pcap.__file__ or ""),
    ]


def build_zip(dest: Path) -> Path:
    """The --py-files archive: the kanalyze and dissectors packages and the Data Source hook,
    sources only (no caches), at the archive's top level as they are imported."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for root in _package_roots():
            if root.is_file():
                z.write(root, root.name)
                continue
            for path in sorted(root.rglob("*")):
                if "__pycache__" in path.parts or not path.is_file() or path.suffix == ".pyc":
                    continue
                z.write(path, Path(root.name) / path.relative_to(root))
    tmp.replace(dest)
    return dest


def pack(out_dir: str | Path) -> tuple[Path, Path]:
    """Write the archive and the entry script into `out_dir`; (archive, entry script)."""
    out = Path(out_dir)
    archive = build_zip(out / ZIP_NAME)
    entry = out / ENTRY_NAME
    entry.write_text(ENTRY)
    return archive, entry


def command(archive: Path, entry: Path, master: str = "spark://HOST:7077") -> str:
    return (
        f"spark-submit --master {master} --py-files {shlex.quote(str(archive))} "
        f"{shlex.quote(str(entry))} PATH... --out DIR"
    )


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kanalyze.spark.submit",
        description="Write the spark-submit entry script and the --py-files archive of kanalyze.",
    )
    ap.add_argument("out_dir", metavar="DIR", help="where to write the two files")
    args = ap.parse_args(argv)
    try:
        archive, entry = pack(args.out_dir)
    except OSError as e:
        sys.stderr.write(f"kanalyze: error: {args.out_dir}: {e.strerror or e}\n")
        return 2
    sys.stdout.write(f"{archive}\n{entry}\n{command(archive, entry)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
