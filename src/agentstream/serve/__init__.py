"""``agentstream serve``: runs on the bus over HTTP (JSON, SSE, NDJSON, any dialect) and a live page.

:mod:`~agentstream.serve.app` builds the Starlette application, :mod:`~agentstream.serve.hub`
reads the bus for it, :mod:`~agentstream.serve.security` decides who may use it; the page's
files are in ``static/`` (plain HTML, CSS and JavaScript: no build step, nothing fetched
from elsewhere). The server keeps no state: any number of them can serve one bus.
"""
