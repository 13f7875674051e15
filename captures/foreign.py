"""Clients outside Python for make_captures.py: Sarama (Go), kafkajs and kafka-node (Node.js), kcat.

Each non-Python client is driven by a small program in ``captures/clients/`` that reads one JSON
job on stdin and prints what the client saw (records produced with their acknowledged offsets,
records consumed, commits, admin results, errors) as one JSON object on stdout. This module finds
or builds those programs and runs them; the scenarios in make_captures.py turn the output into
truth. Nothing here depends on kanalyze.

Where the clients come from (none is a Python package):

* Sarama: Debian's ``golang-github-shopify-sarama-dev`` (1.22) with ``golang-go`` (1.19); built
  offline in GOPATH mode against ``/usr/share/gocode``.
* kafkajs, kafkajs-snappy, kafka-node: npm packages installed in a directory OUTSIDE the repo,
  named by the ``KANALYZE_NODE_MODULES`` environment variable (its ``node_modules`` folder).
* kcat: Debian's ``kcat`` (1.7.1), on the system librdkafka (2.0.2) or, through
  LD_LIBRARY_PATH, on the one confluent-kafka bundles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

CLIENTS = Path(__file__).resolve().parent / "clients"
GOCODE = Path("/usr/share/gocode")


def debian_version(package: str) -> str | None:
    """Installed version of a Debian package, None when dpkg does not know it."""
    if not shutil.which("dpkg-query"):
        return None
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


def sarama_client(build_dir: Path) -> Path:
    """Build captures/clients/sarama into build_dir (GOPATH mode, no network) and return it."""
    if not shutil.which("go"):
        raise RuntimeError("go is missing: apt-get install golang-go")
    if not (GOCODE / "src/github.com/Shopify/sarama").is_dir():
        raise RuntimeError("Sarama is missing: apt-get install golang-github-shopify-sarama-dev")
    build_dir.mkdir(parents=True, exist_ok=True)
    binary = build_dir / "sarama_client"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{build_dir / 'gopath'}:{GOCODE}",
        "GOCACHE": str(build_dir / "gocache"),
        "GOFLAGS": "",
    }
    out = subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=CLIENTS / "sarama",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"building the Sarama client failed: {out.stderr[-2000:]}")
    return binary


def node_modules() -> Path:
    """The node_modules folder holding kafkajs, kafkajs-snappy and kafka-node."""
    path = os.environ.get("KANALYZE_NODE_MODULES")
    if not path or not (Path(path) / "kafkajs").is_dir():
        raise RuntimeError(
            "set KANALYZE_NODE_MODULES to a node_modules folder with kafkajs, kafkajs-snappy and "
            "kafka-node (npm install them in a directory outside the repo)"
        )
    return Path(path)


def node_package_version(package: str) -> str:
    meta = json.loads((node_modules() / package / "package.json").read_text())
    return str(meta["version"])


def run_job(cmd: list[str], job: dict[str, Any], log: Path, timeout: float = 90) -> dict[str, Any]:
    """Run a client program with `job` on stdin; its JSON stdout is returned, stderr goes to log."""
    env = {**os.environ}
    if cmd[0] == "node":
        env["NODE_PATH"] = str(node_modules())
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as err:
        out = subprocess.run(
            cmd,
            input=json.dumps(job),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"{cmd[-1]} exited {out.returncode}; see {log}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def node_script(name: str) -> list[str]:
    """Command line running captures/clients/<name> with node."""
    if not shutil.which("node"):
        raise RuntimeError("node is missing")
    return ["node", str(CLIENTS / name)]


def kcat_env(build_dir: Path | None = None) -> dict[str, str]:
    """Environment for kcat: as installed (None), or running on the librdkafka that
    confluent-kafka's wheel bundles (a `librdkafka.so.1` link to it in build_dir)."""
    env = {**os.environ}
    if build_dir is None:
        return env
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so.1"))
    if not found:
        raise RuntimeError(f"no bundled librdkafka in {libs}")
    build_dir.mkdir(parents=True, exist_ok=True)
    link = build_dir / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(found[0])
    env["LD_LIBRARY_PATH"] = str(build_dir)
    return env


def kcat_version(env: dict[str, str] | None = None) -> str:
    """kcat's own version line, which names the librdkafka it runs on."""
    if not shutil.which("kcat"):
        raise RuntimeError("kcat is missing: apt-get install kcat")
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("Version")]
    return lines[0].split(" builtin.features")[0] if lines else "unknown"
