"""Arrow's memory pool for the pipeline's processes: the system allocator, unless the user
chose one (`ARROW_DEFAULT_MEMORY_POOL`, which Arrow reads once, when pyarrow is imported).

Why: pyarrow's default pool (mimalloc) asks the kernel for transparent huge pages, and the
first touch of each 2 MB page clears all of it, in kernel time. A session's first large run
paid that wherever Arrow grew: on the 1 GB bench set 0.2-0.3 s of the driver's 0.3 s of
aggregates and 0.1-0.2 s per write task (a second run on the same session, its pools grown,
did not). With the system allocator the first run costs what the second did (docs/spark.md,
E12).

Importing `kanalyze.spark` sets the default in this process's environment, so the driver
uses it when pyarrow was not imported before, and every process it starts inherits it (the
local JVM, so the Python workers of a local master); `session.session_defaults` passes it to
a cluster's executors (`spark.executorEnv`).
"""

from __future__ import annotations

import os

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
SYSTEM = "system"


def prefer_system_pool() -> None:
    """The system allocator as Arrow's default for this process (if pyarrow is not imported
    yet) and the processes it starts, unless `POOL_ENV` is already set."""
    os.environ.setdefault(POOL_ENV, SYSTEM)
