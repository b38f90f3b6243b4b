"""Who may talk to the server: the bind rule, the bearer token and its cookie, same-site writes.

* Anything but a loopback address needs a token (``--token`` or ``$AGENTSTREAM_TOKEN``).
* With a token, every request but the login form and the shipped static files
  carries ``Authorization: Bearer T`` or the cookie the login form sets. The
  cookie holds an HMAC of the token, not the token, so it is the same on every
  server sharing the token and useless anywhere else. Comparisons are constant-time;
  the token is never logged.
* A state-changing request (anything but GET/HEAD) from another site is refused,
  whatever credentials it carries (``Sec-Fetch-Site`` / ``Origin`` must say same-origin).
* Every response carries a strict Content-Security-Policy (scripts and styles only
  from this server, no inline code) and no CORS header at all.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from typing import Final

from agentstream.errors import UsageError

__all__ = [
    "COOKIE_NAME",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "check_bind",
    "cookie_value",
    "cross_site",
    "is_authorized",
    "resolve_token",
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
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


def resolve_token(given: str | None) -> str | None:
    """``--token``, else ``$AGENTSTREAM_TOKEN``; empty means none."""
    token = given if given is not None else os.environ.get(TOKEN_ENV, "")
    return token or None


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token (:class:`UsageError`, exit 2)."""
    if token is not None or _is_loopback(host):
        return
    raise UsageError(
        f"refusing to listen on {host} without a token: anyone who can reach it could read every run "
        "and start jobs",
        fix=f"pass --token T (or set ${TOKEN_ENV}), or keep the default --host 127.0.0.1",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cookie_value(token: str) -> str:
    """What the login cookie holds: derived from the token, never the token itself."""
    return hmac.new(token.encode(), b"agentstream serve session", hashlib.sha256).hexdigest()


def is_authorized(token: str, authorization: str | None, cookie: str | None) -> bool:
    """A bearer header with the token, or the login cookie; both compared in constant time."""
    if authorization is not None:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return True
    return cookie is not None and hmac.compare_digest(cookie.encode(), cookie_value(token).encode())


def cross_site(method: str, host: str | None, origin: str | None, fetch_site: str | None) -> bool:
    """True for a state-changing request another site made (a browser says so in its headers)."""
    if method in _SAFE_METHODS:
        return False
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    if origin is None:
        return False  # not sent by a browser page: a program with its own credentials
    scheme, _, rest = origin.partition("://")
    return origin == "null" or scheme not in ("http", "https") or rest != (host or "")
