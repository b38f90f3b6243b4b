"""``agentstream serve``: the Host names it answers to, the numbers it reads from requests, its options.

Real server processes on a real SQLite bus, spoken to over loopback with ``http.client``.
A DNS-rebinding page is played by sending its ``Host`` (and ``Origin``) to 127.0.0.1:
that is exactly what a browser sends once the page's name resolves there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from _bus_fixtures import cli
from _serve_support import Reply, Server, SseStream, finished_run, publish, request
from agentstream import protocol as p
from agentstream.serve.security import cross_site

MAX_SEQ = 2**63 - 2


@pytest.fixture(scope="module")
def bus_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('serve-security-bus') / 'bus.sqlite3'}"


@pytest.fixture(scope="module")
def server(bus_url: str) -> Iterator[Server]:
    finished_run(bus_url, "done")
    with Server(bus_url) as running:
        yield running


def _queued(server: Server) -> int:
    return int(request(server, "GET", "/api/runs?status=queued&limit=1000").json()["result"]["count"])


def _assert_error(reply: Reply, status: int, code: str) -> Any:
    assert reply.status == status, reply.body
    assert reply.headers["content-type"] == "application/json"
    envelope = reply.json()
    assert envelope["ok"] is False and envelope["fix"]
    assert envelope["error"]["code"] == code
    return envelope


# -- Host names --------------------------------------------------------------------------------


ROUTES = (
    ("GET", "/"),
    ("GET", "/runs/done"),
    ("GET", "/static/app.js"),
    ("GET", "/login"),
    ("GET", "/api/runs"),
    ("GET", "/api/runs/done"),
    ("GET", "/api/runs/done/events"),
    ("HEAD", "/api/runs"),
    ("POST", "/api/runs"),
    ("POST", "/api/runs/done/cancel"),
    ("POST", "/login"),
)


def test_without_a_token_every_route_refuses_a_host_that_is_not_a_loopback_name(server: Server) -> None:
    port = server.port
    foreign = (
        f"evil.example:{port}",
        "evil.example",
        "evil.example:1234",
        f"127.0.0.1.evil.example:{port}",
        f"localhost.evil.example:{port}",
        f"10.0.0.1:{port}",
        "127.0.0.1:1",  # a loopback name, but not this server's port
        f"[::2]:{port}",
        f"::1:{port}",
    )
    for host in foreign:
        for method, path in ROUTES:
            reply = request(server, method, path, body=b'{"prompt": "x"}', headers={"Host": host})
            assert reply.status == 403, (host, method, path, reply.status)
            if method != "HEAD":
                envelope = _assert_error(reply, 403, "FORBIDDEN")
                assert repr(host) in envelope["error"]["message"]
                assert f"http://127.0.0.1:{port}/" in envelope["fix"] and "--token" in envelope["fix"]
            assert "access-control-allow-origin" not in reply.headers
            assert "script-src 'self'" in reply.headers["content-security-policy"]


def test_an_event_stream_is_refused_to_a_foreign_host_before_it_starts(server: Server) -> None:
    stream = SseStream(server, "/api/runs/done/events", headers={"Host": f"evil.example:{server.port}"})
    try:
        assert stream.status == 403 and stream.headers["content-type"] == "application/json"
        assert list(stream.events()) == []
    finally:
        stream.close()


def test_a_rebinding_page_cannot_queue_a_job_even_when_its_origin_matches_its_host(server: Server) -> None:
    before = _queued(server)
    attacker = f"evil.example:{server.port}"
    body = json.dumps({"prompt": "hi", "args": ["--permission-mode", "bypassPermissions"]}).encode()
    for content_type in ("text/plain", "application/json"):
        headers = {
            "Host": attacker,
            "Origin": f"http://{attacker}",
            "Sec-Fetch-Site": "same-origin",
            "Content-Type": content_type,
        }
        _assert_error(request(server, "POST", "/api/runs", body=body, headers=headers), 403, "FORBIDDEN")
    assert _queued(server) == before


def test_loopback_names_with_this_port_or_none_are_served(server: Server) -> None:
    port = server.port
    for host in (
        f"127.0.0.1:{port}",
        "127.0.0.1",
        f"127.8.9.10:{port}",
        f"localhost:{port}",
        "LocalHost",
        f"[::1]:{port}",
        "[::1]",
        f"[0:0:0:0:0:0:0:1]:{port}",
    ):
        assert request(server, "GET", "/api/runs", headers={"Host": host}).status == 200, host
        assert request(server, "GET", "/static/app.js", headers={"Host": host}).status == 200, host
        page = request(server, "GET", "/runs/done", headers={"Host": host})
        assert page.status == 200 and b"app.js" in page.body, host
    same = {
        "Host": f"localhost:{port}",
        "Origin": f"http://localhost:{port}",
        "Sec-Fetch-Site": "same-origin",
    }
    assert request(server, "POST", "/api/runs/done/cancel", headers=same).status == 409  # through the guard
    other_port = {"Host": f"localhost:{port}", "Origin": "http://localhost:3000"}
    _assert_error(request(server, "POST", "/api/runs/done/cancel", headers=other_port), 403, "FORBIDDEN")


def test_with_a_token_any_host_name_is_served_to_whoever_has_the_token(bus_url: str) -> None:
    token = "host-check-token"
    finished_run(bus_url, "token-done")
    with Server(bus_url, env={"AGENTSTREAM_TOKEN": token}) as server:
        proxied = {"Host": "runs.example.com", "Authorization": f"Bearer {token}"}
        assert request(server, "GET", "/api/runs", headers=proxied).status == 200
        write = {**proxied, "Origin": "https://runs.example.com"}
        assert request(server, "POST", "/api/runs/token-done/cancel", headers=write).status == 409
        _assert_error(
            request(server, "GET", "/api/runs", headers={"Host": "runs.example.com"}), 401, "UNAUTHORIZED"
        )
        rebound = {"Host": "evil.example", "Origin": "http://evil.example"}
        _assert_error(request(server, "POST", "/api/runs", body=b"{}", headers=rebound), 401, "UNAUTHORIZED")


def test_a_token_with_non_ascii_characters_works_in_the_header_as_in_the_form(bus_url: str) -> None:
    """Clients send the header's text as UTF-8 (curl does), which the server reads as Latin-1 bytes."""
    token = "pässwörd-ключ"
    with Server(bus_url, env={"AGENTSTREAM_TOKEN": token}) as server:
        bearer: Any = f"Bearer {token}".encode()  # http.client would send str headers as Latin-1
        assert request(server, "GET", "/api/runs", headers={"Authorization": bearer}).status == 200
        wrong: Any = f"Bearer {token}x".encode()
        assert request(server, "GET", "/api/runs", headers={"Authorization": wrong}).status == 401
        form = urlencode({"token": token, "next": "/"}).encode()
        assert request(server, "POST", "/login", body=form).status == 303


def test_the_origin_check_does_not_trust_a_host_the_attacker_chose() -> None:
    attacker = "evil.example:8765"
    # Without a token only a loopback origin of the server's port is its own, whatever the Host says.
    assert cross_site("POST", attacker, f"http://{attacker}", "same-origin", loopback_port=8765)
    assert cross_site("POST", attacker, f"http://{attacker}", None, loopback_port=8765)
    assert not cross_site(
        "POST", "127.0.0.1:8765", "http://127.0.0.1:8765", "same-origin", loopback_port=8765
    )
    assert cross_site("POST", "127.0.0.1:9999", "http://127.0.0.1:9999", "same-origin", loopback_port=8765)
    # With a token (loopback_port None) the token is the protection: a proxy's public name is fine.
    assert not cross_site("POST", "runs.example.com", "https://runs.example.com", None, loopback_port=None)


# -- numbers read from requests -------------------------------------------------------------------------


NOT_SEQS = (
    "%C2%B2",
    "%D9%A3",
    "-1",
    "+1",
    "1.5",
    "1e3",
    "0x10",
    " 1",
    "",
    "99999999999999999999999",
    "9" * 5000,
)


def test_every_number_in_a_request_is_checked_and_a_bad_one_is_a_400(bus_url: str) -> None:
    finished_run(bus_url, "numbers")
    with Server(bus_url) as server:
        for text in NOT_SEQS:
            reply = request(server, "GET", f"/api/runs/numbers/events?from_seq={text.replace(' ', '%20')}")
            envelope = _assert_error(reply, 400, "INVALID_INPUT")
            assert "from_seq" in envelope["error"]["message"], text
        # N.K (a dialect line's id) is two whole numbers; "1.5" is one, so it is not in this list.
        bad_ids = ("²", "-1", "1.x", "1.", ".5", "1.5.2", "1.-5", "1.²", f"1.{MAX_SEQ + 1}")
        for header in (*bad_ids, "99999999999999999999999", str(MAX_SEQ + 1), "x"):
            reply = request(server, "GET", "/api/runs/numbers/events", headers={"Last-Event-ID": header})
            envelope = _assert_error(reply, 400, "INVALID_INPUT")
            assert "Last-Event-ID" in envelope["error"]["message"], header
        for text in ("%C2%B2", "%D9%A3", "0", "1001", "-5", "2.0", "", "99999999999999999999999"):
            reply = request(server, "GET", f"/api/runs?limit={text}")
            envelope = _assert_error(reply, 400, "INVALID_INPUT")
            assert "limit" in envelope["error"]["message"], text

        # The edges of each range are served (past the end of a finished run: 204, nothing to follow).
        assert request(server, "GET", "/api/runs?limit=1000").status == 200
        assert request(server, "GET", "/api/runs?limit=0001").json()["result"]["count"] == 1
        for path, headers in (
            (f"/api/runs/numbers/events?from_seq={MAX_SEQ}", {}),
            ("/api/runs/numbers/events", {"Last-Event-ID": str(MAX_SEQ)}),
            ("/api/runs/numbers/events", {"Last-Event-ID": f"{MAX_SEQ}.{MAX_SEQ}"}),
        ):
            stream = SseStream(server, path, headers=headers)
            assert stream.status == 204 and list(stream.events()) == []
            stream.close()
        resumed = SseStream(server, "/api/runs/numbers/events", headers={"Last-Event-ID": "0002"})
        assert [event.id for event in resumed.events()] == ["3"]
        resumed.close()
    assert b"Traceback" not in server.stderr and b"OverflowError" not in server.stderr, server.stderr.decode()


# -- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--heartbeat", "-1", "argument --heartbeat"),
        ("--heartbeat", "0", "argument --heartbeat"),
        ("--heartbeat", "nan", "argument --heartbeat"),
        ("--heartbeat", "inf", "argument --heartbeat"),
        ("--heartbeat", "1e-9", "'1e-9' is too short a heartbeat: use 0.1 seconds or more"),
        ("--heartbeat", "0.09", "'0.09' is too short a heartbeat: use 0.1 seconds or more"),
        ("--port", "70000", "is not a port (0 to 65535"),
        ("--port", "65536", "is not a port (0 to 65535"),
        ("--port", "-1", "argument --port"),
        ("--port", "http", "argument --port"),
    ],
)
def test_a_bad_numeric_option_exits_2_before_serving(
    bus_url: str, option: str, value: str, says: str
) -> None:
    args = ["serve", "--bus", bus_url, "--port", "0", option, value]
    done = cli(*args, timeout=20)  # a server that started anyway would never end
    assert done.returncode == 2, done.stderr
    assert says.encode() in done.stderr and b"fix: " in done.stderr
    assert b"listening on" not in done.stderr and b"Traceback" not in done.stderr


def test_the_shortest_heartbeat_is_served_and_pings_an_idle_stream(bus_url: str) -> None:
    publish(bus_url, "idle-run", [p.Start(command="exec idle")])
    with Server(bus_url, "--heartbeat", "0.1") as server:
        stream = SseStream(server, "/api/runs/idle-run/events?from_seq=1")
        first = stream.response.readline()  # nothing to send but pings
        stream.close()
    assert first.startswith(b": ping"), first


def test_a_host_that_cannot_be_encoded_exits_2_before_serving(bus_url: str) -> None:
    done = cli("serve", "--bus", bus_url, "--host", "é..", "--token", "t", "--port", "0", timeout=20)
    assert done.returncode == 2, done.stderr
    assert b"cannot listen on" in done.stderr and b"fix: " in done.stderr and b"Traceback" not in done.stderr
