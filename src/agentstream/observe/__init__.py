"""Observing agents from outside their streams: usage and cost reports over session logs and the bus,
and OpenTelemetry traces built from canonical events."""
