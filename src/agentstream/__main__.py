from agentstream.cli import entry

entry()
