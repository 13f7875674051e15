"""kanalyze: a Kafka wire-protocol analyzer."""

__version__ = "0.1.0"

# the compiled hot modules or their pure-Python source (dissectors/native.py); importing
# dissectors installs the switch before any kanalyze module loads
import dissectors as _dissectors  # noqa: E402, F401
