"""The agent behind ``agentstream exec``: a tool-using loop over real model providers.

* :mod:`.loop` — the turn loop (model call, streamed deltas, tool calls, retries);
* :mod:`.conversation` — the provider-neutral message list kept in the session store;
* :mod:`.providers` — OpenAI (and compatible servers, Ollama), Anthropic, cassette replay;
* :mod:`.tools`, :mod:`.permissions`, :mod:`.sessions` — what the agent may do, and what it remembers;
* :mod:`.pricing` — the cost of a model call, when its price is known.

Nothing here imports a provider SDK until a model is called. See ``docs/agent.md``.
"""
