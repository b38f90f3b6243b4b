"""ACP (Agent Client Protocol) on both sides: ``agentstream acp`` serves it, ``wrap --from acp`` reads it.

See ``docs/acp.md``. Nothing here is imported at start-up.
"""
