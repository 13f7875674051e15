"""Views an operator reads: statistics tables, the cluster as seen, records, progress."""
