"""Every core, offline: the work of one run split into shards decoded by worker processes and
merged back into the exact output of one process (`docs/performance.md`).

`plan.py` decides who does what (shared with the Spark pipeline), `worker.py` runs one shard,
`merge.py` puts the shards' results back into the one-process order, `run.py` drives them.
"""
