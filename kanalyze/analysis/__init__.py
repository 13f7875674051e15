"""Pure consumers of exchanges: statistics, replication, delivery semantics, groups."""
