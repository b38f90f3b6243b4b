__version__ = "0.2.0"
PROTOCOL_VERSION = 1
"""The canonical protocol's version (``v`` on every event); kept here so ``--version`` needs no import."""
