"""The one exception type users see: a one-line message naming the problem and what to do."""


class SpgnnError(Exception):
    """Bad input or configuration. The command line prints ``spgnn: error: <message>`` and exits 2."""
