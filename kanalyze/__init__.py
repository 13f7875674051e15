"""kanalyze: a Kafka wire-protocol analyzer."""

__version__ = "0.1.0"
