"""The Starlette application behind ``agentstream serve``: the JSON/SSE API and the page.

Routes (all behind the token when one is set, see :mod:`agentstream.serve.security`):

* ``GET /api/runs`` — the envelope ``agentstream runs`` prints (``?status=``, ``?limit=``).
* ``GET /api/runs/{run_id}`` — one run's envelope.
* ``GET /api/runs/{run_id}/events`` — SSE (``id:`` = ``seq``, ``SEQ.N`` for a dialect's
  lines; ``Last-Event-ID`` or ``?from_seq=`` resumes), NDJSON with ``Accept:
  application/x-ndjson``, any dialect that can be written with ``?dialect=NAME``; ends
  after the run's ``result``. Over SSE, a resume point past a finished run's end is 204.
* ``POST /api/runs`` — queue a job, as ``agentstream submit`` does.
* ``POST /api/runs/{run_id}/cancel`` — end a queued or live run as interrupted.
* ``GET /``, ``GET /runs/{run_id}`` — the page; ``/static/…`` its files; ``/login`` the token form.

Errors under ``/api/`` (an unknown route and a method a route does not take included)
are the envelope every command prints on failure, with an HTTP status that matches its code.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qs, unquote_to_bytes

from agentstream._extras import require
from agentstream.envelope import Envelope, envelope_json, error_envelope
from agentstream.errors import AgentstreamError, ErrorCode, ExitCode, UsageError
from agentstream.serve import security
from agentstream.serve.events import Line, ResumePoint, encoder_for, run_lines
from agentstream.serve.hub import RunHub

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from agentstream.bus import Bus

__all__ = ["ServeSettings", "create_app", "server_url"]

STATIC: Final = Path(__file__).with_name("static")
NDJSON: Final = "application/x-ndjson"
MAX_RUN_ID: Final = 4096
"""The longest run id served, in characters. The bus and ``exec --session-id`` set no limit;
this one only keeps a request from making the server look up (and repeat) megabytes."""
MAX_BODY: Final = 1 << 20
MAX_SEQ: Final = 2**63 - 2
"""The largest seq a client may name: the one after it must still fit the bus's signed 64-bit integers."""
_STATUS_OF_CODE: Final = {
    ErrorCode.RUN_NOT_FOUND: 404,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.BUS_UNAVAILABLE: 503,
}


@dataclass
class ServeSettings:
    bus_url: str | None = None
    token: str | None = None
    heartbeat_s: float = 15.0
    """Seconds between SSE comment lines on an idle stream."""


class ApiError(AgentstreamError):
    """An error with an HTTP status of its own (401, 403, 409…)."""

    def __init__(self, status: int, message: str, *, code: str, fix: str) -> None:
        super().__init__(message, code=code, fix=fix)
        self.status = status


def create_app(settings: ServeSettings) -> ASGIApp:
    """The ASGI application: Starlette's routes behind :class:`_Guard`."""
    require("starlette", "serve")
    require("sse_starlette", "serve")
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    hub = RunHub(settings.bus_url)
    api = _Api(hub, settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            hub.close()

    routes = [
        Route("/", api.page, methods=["GET"]),
        Route("/runs/{run_id}", api.page, methods=["GET"]),
        Route("/login", api.login_form, methods=["GET"]),
        Route("/login", api.login, methods=["POST"]),
        Route("/api/runs", api.list_runs, methods=["GET"]),
        Route("/api/runs", api.submit, methods=["POST"]),
        Route("/api/runs/{run_id}", api.get_run, methods=["GET"]),
        Route("/api/runs/{run_id}/events", api.events, methods=["GET"]),
        Route("/api/runs/{run_id}/cancel", api.cancel, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _routing_error(request, exc, routes)

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    # Starlette would answer "/api/runs/" with a bodiless 307; _routing_error answers instead.
    app.router.redirect_slashes = False
    return _Guard(app, settings.token)


def server_url(host: str, port: int) -> str:
    """``http://HOST:PORT/`` for a listening address (an IPv6 one in brackets)."""
    bare = host.strip("[]")
    return f"http://[{bare}]:{port}/" if ":" in bare else f"http://{bare}:{port}/"


class _Guard:
    """ASGI middleware: Host name, token, same-site writes, security headers on every response."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *security.SECURITY_HEADERS]
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        from starlette.requests import Request

        request = Request(scope)
        path: str = scope["path"]
        headers = request.headers
        host = headers.get("host")
        server: tuple[str, int] | None = scope.get("server")  # the listening socket's address and port
        port = server[1] if server else None
        if self.token is None and not security.loopback_authority(host, port):
            return _foreign_host(host, server)
        if security.cross_site(
            scope["method"],
            host,
            headers.get("origin"),
            headers.get("sec-fetch-site"),
            loopback_port=None if self.token else port,
        ):
            return _error_response(
                "agentstream serve",
                ApiError(
                    403,
                    f"refused a cross-site {scope['method']} to {path}",
                    code=ErrorCode.FORBIDDEN,
                    fix="send state-changing requests from this server's own page or from a program, not another site",
                ),
            )
        if self.token is None or path.startswith("/static/") or path == "/login":
            return None
        if security.is_authorized(
            self.token, headers.get("authorization"), request.cookies.get(security.COOKIE_NAME)
        ):
            return None
        if not path.startswith("/api/"):
            return _login_page(401)
        return _error_response(
            "agentstream serve",
            ApiError(
                401,
                "missing or wrong token",
                code=ErrorCode.UNAUTHORIZED,
                fix="send 'Authorization: Bearer <token>' (the token given to 'agentstream serve')",
            ),
            headers={"WWW-Authenticate": 'Bearer realm="agentstream"'},
        )


def _routing_error(request: Request, exc: HTTPException, routes: list[BaseRoute]) -> Response:
    """Starlette's own 404 and 405: the envelope under ``/api/``, so every API answer has a code and a fix."""
    from starlette.responses import PlainTextResponse, RedirectResponse
    from starlette.routing import Match

    path = request.url.path
    unslashed = _without_trailing_slash(request, routes) if exc.status_code == 404 else None
    if not path.startswith("/api/"):
        if unslashed is not None:  # a page: the redirect Starlette would have made
            return RedirectResponse(unslashed, status_code=307)
        return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
    method = request.method
    command = f"{method} {_shown(path, 200)}"
    if exc.status_code == 405:
        # Every route on this path, not only the first one Starlette tried (GET and POST /api/runs).
        allowed = sorted(
            {
                verb
                for route in routes
                if route.matches(request.scope)[0] is not Match.NONE
                for verb in getattr(route, "methods", None) or ()
            }
        )
        allow = ", ".join(allowed)
        error = ApiError(
            405,
            f"{method} is not allowed on {_shown(path, 200)}",
            code=ErrorCode.INVALID_INPUT,
            fix=f"use {allow} on this path",
        )
        return _error_response(command, error, headers={"Allow": allow})
    fix = _ROUTES_FIX if unslashed is None else f"drop the trailing slash: {method} {_shown(unslashed, 200)}"
    error = ApiError(
        exc.status_code,
        f"no API route {command}" if exc.status_code == 404 else f"{exc.detail}: {command}",
        code=ErrorCode.INVALID_INPUT,
        fix=fix,
    )
    return _error_response(command, error, headers=dict(exc.headers or {}))


def _without_trailing_slash(request: Request, routes: list[BaseRoute]) -> str | None:
    """The request's URL path without its trailing slash, when a route takes that path; else None."""
    from starlette.routing import Match

    path: str = request.scope["path"]
    if path == "/" or not path.endswith("/"):
        return None
    scope = {**request.scope, "path": path.rstrip("/") or "/"}
    if not any(route.matches(scope)[0] is not Match.NONE for route in routes):
        return None
    url = request.url.path.rstrip("/") or "/"
    return f"{url}?{request.url.query}" if request.url.query else url


_ROUTES_FIX: Final = (
    "use GET /api/runs, GET /api/runs/RUN, GET /api/runs/RUN/events, POST /api/runs or "
    "POST /api/runs/RUN/cancel, with RUN percent-encoded (a run id with '/' cannot be addressed)"
)


def _foreign_host(host: str | None, server: tuple[str, int] | None) -> Response:
    """The refusal of a request that names the server by anything but a loopback name."""
    where = server_url(*server) if server else "this server's loopback address"
    return _error_response(
        "agentstream serve",
        ApiError(
            403,
            f"refused a request for host {host!r}: without a token this server answers only to loopback "
            "names (127.0.0.1, localhost, [::1]), so that no other site can point its own name at it and "
            "read runs or start jobs",
            code=ErrorCode.FORBIDDEN,
            fix=f"open {where} (or localhost on the same port); to serve other host names, start "
            "'agentstream serve' with --token T",
        ),
    )


class _Api:
    def __init__(self, hub: RunHub, settings: ServeSettings) -> None:
        from agentstream.bus.summary import LiveRuns

        self.hub = hub
        self.settings = settings
        self.live_runs = LiveRuns(hub.lost_after)
        """Live runs' usage so far and their producers' watches: the run list, which every open page polls,
        reads only new events and shows a run whose producer died as ended."""

    # -- the page ------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        from starlette.responses import FileResponse

        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def login_form(self, request: Request) -> Response:
        return _login_page(200)

    async def login(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        token = self.settings.token
        try:
            body = await _bounded_body(request, "send only the login form's token and next fields")
        except ApiError as exc:
            return _error_response("agentstream serve", exc)
        form = parse_qs(body.decode("utf-8", "replace"))
        given = form.get("token", [""])[-1]
        target = form.get("next", ["/"])[-1]
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            target = "/"
        if token is None:
            return RedirectResponse(target, status_code=303)
        if not security.token_matches(token, given.strip().encode()):
            return _login_page(401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            security.COOKIE_NAME,
            security.cookie_value(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    # -- the API ---------------------------------------------------------------------

    async def list_runs(self, request: Request) -> Response:
        from agentstream.bus import RUN_STATUSES
        from agentstream.bus.summary import RUNS_COMMAND, runs_envelope

        statuses = request.query_params.getlist("status")
        limit_text = request.query_params.get("limit", "20")

        async def build() -> Envelope:
            bad = [status for status in statuses if status not in RUN_STATUSES]
            if bad:
                raise UsageError(f"unknown status {bad[0]!r}", fix=f"use one of: {', '.join(RUN_STATUSES)}")
            limit = _whole_number(limit_text, "limit", 1, 1000, fix="use a whole number from 1 to 1000")
            return await self.hub.call(
                lambda bus: runs_envelope(bus, statuses=statuses, limit=limit, live=self.live_runs)
            )

        return await _answer(RUNS_COMMAND, build)

    async def get_run(self, request: Request) -> Response:
        from agentstream.bus.summary import RUNS_COMMAND, run_envelope

        run_id = request.path_params["run_id"]

        async def build() -> Envelope:
            _check_run_id(request)
            return await self.hub.call(lambda bus: run_envelope(bus, run_id, self.live_runs))

        return await _answer(
            f"{RUNS_COMMAND} {_run_id_of(request)}", build
        )  # the command run_envelope names on success

    async def submit(self, request: Request) -> Response:
        from agentstream.cli._submit import SUBMIT_COMMAND, submit_job, submitted_envelope

        async def build() -> Envelope:
            prompt, args = _job_request(await _bounded_body(request, _JOB_FIX))
            job = await self.hub.call(lambda bus: submit_job(bus, prompt, args))
            return submitted_envelope(job)

        return await _answer(SUBMIT_COMMAND, build, status=202)

    async def cancel(self, request: Request) -> Response:
        from agentstream.actions import follow_action, runs_action
        from agentstream.bus.queue import cancel_run
        from agentstream.bus.summary import known_run, run_row
        from agentstream.envelope import ok_envelope

        run_id = request.path_params["run_id"]
        command = f"POST /api/runs/{_run_id_of(request)}/cancel"

        def cancel(bus: Bus) -> Envelope:
            info = known_run(bus, run_id)
            if info.terminal or not cancel_run(bus, run_id, by="a request to agentstream serve"):
                ended = known_run(bus, run_id).status
                raise ApiError(
                    409,
                    f"run {run_id!r} has already ended ({ended})",
                    code=ErrorCode.INVALID_INPUT,
                    fix="only a queued or running run can be cancelled",
                )
            row = run_row(bus, known_run(bus, run_id), self.live_runs)
            return ok_envelope(command, {"run": row}, [follow_action(run_id), runs_action()])

        async def build() -> Envelope:
            _check_run_id(request)
            return await self.hub.call(cancel)

        return await _answer(command, build)

    async def events(self, request: Request) -> Response:
        from agentstream.bus.summary import known_run

        run_id = request.path_params["run_id"]
        command = f"agentstream follow {_run_id_of(request)}"
        try:
            _check_run_id(request)
            start = _resume_point(request)
            encoder = encoder_for(request.query_params.get("dialect"))
            if encoder is not None:
                encoder.reproducible(run_id)  # a resumed stream is encoded again: the same ids, line for line
            info = await self.hub.call(lambda bus: known_run(bus, run_id))
            lines = run_lines(self.hub, run_id, start, encoder, command=command)
            ndjson = NDJSON in request.headers.get("accept", "")
            if info.terminal and not ndjson:
                # A finished run's lines are all stored, so the first batch comes at once. None at all:
                # the client resumed past the end, and 204 is what stops an EventSource reconnecting.
                lines, empty = await _peeked(lines)
                if empty:
                    return _no_content()
        except AgentstreamError as exc:
            return _error_response(command, exc)
        if request.method == "HEAD":  # the headers a GET would get, and no body: nothing to follow
            return _headers_only(NDJSON if ndjson else "text/event-stream")
        return _ndjson(lines) if ndjson else self._sse(lines)

    def _sse(self, batches: AsyncIterator[list[Line]]) -> Response:
        from sse_starlette import EventSourceResponse, ServerSentEvent

        async def frames() -> AsyncIterator[bytes]:
            retry: int | None = 1000  # sent once: how long the browser waits before reconnecting
            async for batch in batches:
                chunk = []
                for line in batch:
                    data = line.data.decode("utf-8", "replace")
                    chunk.append(ServerSentEvent(data=data, id=line.id, retry=retry).encode())
                    retry = None
                yield b"".join(chunk)

        return EventSourceResponse(
            frames(),
            ping=self.settings.heartbeat_s,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


async def _peeked(
    batches: AsyncGenerator[list[Line], None],
) -> tuple[AsyncGenerator[list[Line], None], bool]:
    """``batches`` with its first batch already read (the same batches), and whether there were none."""
    first = await anext(batches, None)

    async def again() -> AsyncGenerator[list[Line], None]:
        try:
            if first is not None:
                yield first
                async for batch in batches:
                    yield batch
        finally:
            await batches.aclose()  # a client that leaves early: the hub unsubscribes now, not at GC

    return again(), first is None


def _headers_only(media_type: str) -> Response:
    from starlette.responses import Response

    return Response(media_type=media_type, headers={"Cache-Control": "no-store"})


def _no_content() -> Response:
    from starlette.responses import Response

    return Response(status_code=204, headers={"Cache-Control": "no-store"})


def _ndjson(batches: AsyncIterator[list[Line]]) -> Response:
    from starlette.responses import StreamingResponse

    async def body() -> AsyncIterator[bytes]:
        async for batch in batches:
            yield b"".join(line.data + b"\n" for line in batch)

    return StreamingResponse(body(), media_type=NDJSON, headers={"Cache-Control": "no-store"})


def _resume_point(request: Request) -> ResumePoint:
    """``Last-Event-ID`` resumes after that line (``N``, or a dialect's ``N.K``: the K-th line of seq N);
    ``?from_seq=N`` starts at seq N (as ``follow --from-seq``)."""
    last_id = request.headers.get("last-event-id")
    if last_id is not None and last_id.strip():
        fix = "send the id of the last event received (N, or N.K for a dialect's line)"
        seq_text, dot, frame_text = last_id.strip().partition(".")
        try:
            seq = _whole_number(seq_text, "Last-Event-ID", 0, MAX_SEQ, fix=fix)
            if not dot:
                return ResumePoint(seq + 1)
            return ResumePoint(seq, _whole_number(frame_text, "Last-Event-ID", 0, MAX_SEQ, fix=fix) + 1)
        except UsageError:
            shown = _shown(last_id.strip())
            message = f"bad Last-Event-ID {shown!r}: not N or N.K, whole numbers from 0 to {MAX_SEQ}"
            raise UsageError(message, fix=fix) from None
    from_seq = request.query_params.get("from_seq")
    if from_seq is None:
        return ResumePoint(0)
    fix = "use a seq: a whole number, 0 for the start"
    return ResumePoint(_whole_number(from_seq, "from_seq", 0, MAX_SEQ, fix=fix))


def _whole_number(text: str, name: str, low: int, high: int, *, fix: str) -> int:
    """``text`` as a whole number from ``low`` to ``high``, else a :class:`UsageError` (a 400).

    Every number the server reads from a request goes through here. ASCII digits only
    (``str.isdigit`` and ``int`` also take "²" or "٣"), and bounded before it is converted,
    so an endless number neither costs time nor fails later inside the bus.
    """
    if text.isascii() and text.isdigit() and len(text.lstrip("0")) <= len(str(high)):
        value = int(text)
        if low <= value <= high:
            return value
    raise UsageError(f"bad {name} {_shown(text)!r}: not a whole number from {low} to {high}", fix=fix)


def _shown(text: str, limit: int = 40) -> str:
    """Request text as an error repeats it: never longer than ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def _run_id_of(request: Request) -> str:
    """The path's run id, as answers repeat it: one too long to be a run id is shortened there."""
    run_id: str = request.path_params["run_id"]
    return run_id if len(run_id) <= MAX_RUN_ID else _shown(run_id)


def _check_path_utf8(request: Request) -> None:
    """The path must be UTF-8 once percent-decoded: the server reads other bytes as U+FFFD, which would name
    another run (one whose id holds U+FFFD), so such a path is refused instead."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(
                "bad run id: its percent-encoded bytes are not UTF-8",
                fix="percent-encode the run id's UTF-8 bytes, as GET /api/runs gives it",
            ) from None


def _check_run_id(request: Request) -> None:
    """Refuse only what no run id can be: empty, over :data:`MAX_RUN_ID`, not UTF-8, or with control characters.

    Anything ``exec --session-id`` and the bus take (spaces of any script, NBSP, U+3000,
    symbols) must stay addressable, so this checks Unicode categories Cc (controls) and
    Cs (lone surrogates), not :meth:`str.isprintable`.
    """
    fix = "use a run id from GET /api/runs, percent-encoded"
    _check_path_utf8(request)
    run_id: str = request.path_params["run_id"]
    if not run_id:
        raise UsageError("bad run id: empty", fix=fix)
    if len(run_id) > MAX_RUN_ID:
        raise UsageError(f"bad run id: {len(run_id)} characters, over {MAX_RUN_ID}", fix=fix)
    bad = next((char for char in run_id if unicodedata.category(char) in ("Cc", "Cs")), None)
    if bad is not None:
        raise UsageError(f"bad run id: it holds the control character U+{ord(bad):04X}", fix=fix)


_JOB_FIX: Final = 'send JSON: {"prompt": "what to do", "args": ["--max-turns", "3"]} (args optional)'


async def _bounded_body(request: Request, fix: str) -> bytes:
    """The request body, refused (413) as soon as it passes :data:`MAX_BODY`: never held whole beyond it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise _too_large(fix)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _too_large(fix)
    return bytes(body)


def _too_large(fix: str) -> ApiError:
    return ApiError(
        413, f"request body too large (over {MAX_BODY} bytes)", code=ErrorCode.INVALID_INPUT, fix=fix
    )


def _job_request(body: bytes) -> tuple[str, list[str]]:
    """``{"prompt": "...", "args": ["--max-turns", "3"]}``: submit's PROMPT and exec options."""
    fix = _JOB_FIX
    try:
        request = json.loads(body or b"null")
    except ValueError as exc:
        raise UsageError(f"the body is not JSON: {exc}", fix=fix) from None
    if not isinstance(request, dict):
        raise UsageError(f"the body must be a JSON object, not {_json_kind(request)}", fix=fix)
    unknown = sorted(set(request) - {"prompt", "args"})
    if unknown:
        raise UsageError(f"unknown field {_shown(unknown[0])!r}: the body has only prompt and args", fix=fix)
    if "prompt" not in request:
        raise UsageError("no prompt: the body needs a prompt", fix=fix)
    prompt, args = request["prompt"], request.get("args", [])
    if not isinstance(prompt, str):
        raise UsageError(f"prompt must be a string, not {_json_kind(prompt)}", fix=fix)
    if not prompt.strip():
        raise UsageError("prompt is empty", fix=fix)
    if not isinstance(args, list):
        raise UsageError(f"args must be a list of strings, not {_json_kind(args)}", fix=fix)
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            raise UsageError(f"args must be a list of strings: args[{index}] is {_json_kind(arg)}", fix=fix)
    return prompt, args


def _json_kind(value: object) -> str:
    """What a decoded JSON value is, in the words of an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


async def _answer(command: str, build: Callable[[], Awaitable[Envelope]], *, status: int = 200) -> Response:
    try:
        envelope = await build()
    except AgentstreamError as exc:
        return _error_response(command, exc)
    return _json_response(envelope, status)


def _error_response(command: str, exc: AgentstreamError, headers: dict[str, str] | None = None) -> Response:
    if isinstance(exc, ApiError):
        status = exc.status
    else:
        status = _STATUS_OF_CODE.get(exc.code, 400 if exc.exit_code == ExitCode.USAGE else 500)
    from agentstream.actions import runs_action

    return _json_response(error_envelope(command, exc, [runs_action()]), status, headers)


def _json_response(envelope: Envelope, status: int, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import Response

    return Response(
        envelope_json(envelope) + b"\n",
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", **(headers or {})},
    )


def _login_page(status: int) -> Response:
    from starlette.responses import FileResponse

    return FileResponse(STATIC / "login.html", status_code=status, headers={"Cache-Control": "no-store"})
