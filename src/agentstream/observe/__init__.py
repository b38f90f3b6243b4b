"""Observing runs from outside the stream: telemetry built from canonical events."""
