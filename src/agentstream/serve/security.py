"""Who may talk to the server: the bind rule, the bearer token and its cookie, same-site writes.

* Anything but a loopback address needs a token (``--token`` or ``$AGENTSTREAM_TOKEN``).
* With a token, every request but the login form and the shipped static files
  carries ``Authorization: Bearer T`` or the cookie the login form sets. The
  cookie holds an HMAC of the token, not the token, so it is the same on every
  server sharing the token and useless anywhere else. Comparisons are constant-time;
  the token is never logged.
* Without a token, every request must name the server by a loopback name in ``Host``
  (127.x.y.z, ``localhost``, ``[::1]``; its own port or none). A page on another site can
  point its own name at 127.0.0.1 (DNS rebinding) and so reach the socket, but its
  requests still carry its own name as ``Host``; they are refused.
* A state-changing request (anything but GET/HEAD) from another site is refused,
  whatever credentials it carries (``Sec-Fetch-Site`` / ``Origin`` must say same-origin).
* Every response carries a strict Content-Security-Policy (scripts and styles only
  from this server, no inline code) and no CORS header at all.
* A client must send each request (its line, headers and body) within a deadline
  (``--request-timeout``): one that sends it a byte at a time (slowloris) would otherwise hold its
  connection for good, as uvicorn's keep-alive timeout starts again with every byte received.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from typing import TYPE_CHECKING, Any, Final

from agentstream.errors import UsageError

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "COOKIE_NAME",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "check_bind",
    "cookie_value",
    "cross_site",
    "is_authorized",
    "loopback_authority",
    "request_deadline_protocol",
    "resolve_token",
    "token_matches",
]

TOKEN_ENV: Final = "AGENTSTREAM_TOKEN"
COOKIE_NAME: Final = "agentstream_session"
SECURITY_HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it a browser sends "Origin: null" with the page's own form posts (the
    # login form), which the same-site check must refuse. same-origin still tells no other site anything.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


def resolve_token(given: str | None) -> str | None:
    """``--token``, else ``$AGENTSTREAM_TOKEN``; empty means none."""
    token = given if given is not None else os.environ.get(TOKEN_ENV, "")
    return token or None


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token (:class:`UsageError`, exit 2)."""
    if token is not None or _is_loopback(host.strip("[]")):
        return
    raise UsageError(
        f"refusing to listen on {host} without a token: anyone who can reach it could read every run "
        "and start jobs",
        fix=f"pass --token T (or set ${TOKEN_ENV}), or keep the default --host 127.0.0.1",
    )


def _is_loopback(name: str) -> bool:
    """``localhost`` or a loopback address, written as is (no brackets, no port)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cookie_value(token: str) -> str:
    """What the login cookie holds: derived from the token, never the token itself."""
    return hmac.new(token.encode(), b"agentstream serve session", hashlib.sha256).hexdigest()


def token_matches(token: str, given: bytes) -> bool:
    """Whether ``given`` is the token's UTF-8, compared in constant time."""
    return hmac.compare_digest(given, token.encode())


def is_authorized(token: str, authorization: str | None, cookie: str | None) -> bool:
    """A bearer header with the token, or the login cookie; both compared in constant time."""
    if authorization is not None:
        scheme, _, given = authorization.partition(" ")
        # The server reads header bytes as Latin-1: back to those bytes, which a client sends as the
        # token's UTF-8 (as curl does), so that a token with non-ASCII characters works here as in the form.
        if scheme.lower() == "bearer" and token_matches(token, given.strip().encode("latin-1", "replace")):
            return True
    return cookie is not None and hmac.compare_digest(cookie.encode(), cookie_value(token).encode())


def loopback_authority(authority: str | None, port: int | None) -> bool:
    """Whether a ``Host`` value (or an origin's ``host[:port]``) names this server by a loopback name.

    The name is 127.x.y.z, ``localhost`` or ``[::1]``; the port, if given, is ``port``, the one
    the server listens on. A rebinding page's requests carry its own name, which fails here.
    """
    split = _split_authority(authority or "")
    if split is None:
        return False
    name, given_port = split
    if given_port is not None and (port is None or given_port != str(port)):
        return False
    return _is_loopback(name.lower())


def _split_authority(authority: str) -> tuple[str, str | None] | None:
    """``host[:port]`` or ``[v6][:port]`` as (host, port or None); None when it is neither."""
    if not authority.startswith("["):
        name, colon, port = authority.partition(":")
        return name, port if colon else None
    name, bracket, after = authority[1:].partition("]")
    if not bracket or ":" not in name or (after and not after.startswith(":")):
        return None
    return name, after[1:] if after else None


def cross_site(
    method: str, host: str | None, origin: str | None, fetch_site: str | None, *, loopback_port: int | None
) -> bool:
    """True for a state-changing request another site made (a browser says so in its headers).

    ``Origin`` must name the host the request was sent to. A rebinding page sets both
    ``Host`` and ``Origin`` to its own name, so for a server without a token
    (``loopback_port``: the port it listens on; ``None`` when a token guards it) the origin
    must also be a loopback name of that port. With a token such a page gets nothing
    anyway: it has neither the token nor the cookie, which is bound to the real name.
    """
    if method in _SAFE_METHODS:
        return False
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    if origin is None:
        return False  # not sent by a browser page: a program with its own credentials
    scheme, _, rest = origin.partition("://")
    if origin == "null" or scheme not in ("http", "https") or rest != (host or ""):
        return True
    return loopback_port is not None and not loopback_authority(rest, loopback_port)


def request_deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline on each request: ``seconds`` from the connection,
    or from the answer to its last request, for its line, headers and body to arrive whole.

    A connection still waiting for them then is closed. The deadline is on receiving the request only:
    a slow answer (an event stream followed for hours) is never cut by it.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class RequestDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._wait_for_a_request()

        def on_response_complete(self) -> None:
            self._wait_for_a_request()  # first: a pipelined request already in starts its cycle just below
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

        def _wait_for_a_request(self) -> None:
            """Each request's head starts a request cycle of its own: the one current now must not be current
            when the deadline comes."""
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._too_slow, self.cycle)

        def _too_slow(self, waiting_since: object) -> None:
            """No request since, or one whose body is still coming in."""
            cycle = self.cycle
            if (cycle is waiting_since or cycle.more_body) and not self.transport.is_closing():
                self.transport.close()

    return RequestDeadline
