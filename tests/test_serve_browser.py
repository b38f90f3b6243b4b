"""The ``serve`` page in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, via Selenium).

One browser and one server for the module. Run content is published straight to the
bus the server reads; the page is checked as a person would see it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from _serve_support import Server, finished_run, publish, wait_for
from agentstream import protocol as p
from agentstream.bus import open_bus

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
XSS_IMG = "<img src=x onerror=\"window.__pwned='img'\">"
XSS_SCRIPT = "<script>window.__pwned='script'</script>"


@pytest.fixture(scope="module")
def bus_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('browser-bus') / 'bus.sqlite3'}"


@pytest.fixture(scope="module")
def server(bus_url: str) -> Iterator[Server]:
    with Server(bus_url) as running:
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.fail(
            f"the browser tests need {', '.join(missing)}: apt-get install -y chromium chromium-driver "
            "(.ci/run installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _js(browser: Any, script: str) -> Any:
    return browser.execute_script(script)


def _text_of(browser: Any, selector: str) -> str:
    return str(
        _js(browser, f"const n = document.querySelector({selector!r}); return n ? n.textContent : '';")
    )


def _wait_for_page(check: Any, what: str, timeout: float = 10.0) -> Any:
    """``wait_for``, failing also when ``check`` answers only after the timeout: a busy tab blocks
    every script the test runs, so a plain ``wait_for`` would pass once a frozen tab recovers."""
    deadline = time.monotonic() + timeout

    def in_time() -> Any:
        value = check()
        if value and time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: the page was busy past {timeout} s")
        return value

    return wait_for(in_time, timeout, what)


def test_the_runs_page_lists_a_run(browser: Any, server: Server, bus_url: str) -> None:
    finished_run(bus_url, "listed-run")
    browser.get(f"{server.base}/")
    row = wait_for(
        lambda: _js(
            browser,
            "const r = document.querySelector('tr[data-run-id=\"listed-run\"]'); return r && r.textContent;",
        ),
        what="the run's row",
    )
    assert "succeeded" in row and "exec fix the tests" in row and "120" in row and "$0.0020" in row
    link = _js(
        browser, "return document.querySelector('tr[data-run-id=\"listed-run\"] a').getAttribute('href');"
    )
    assert link == "/runs/listed-run"


_OPENING: list[p.Event] = [
    p.Start(command="exec live"),
    p.MessageDelta(message_id="m1", content="Reading the "),
]
_WORKING: list[p.Event] = [
    p.MessageDelta(message_id="m1", content="code now"),
    p.Step(name="build", status="started"),
    p.ToolCall(call_id="c1", name="shell", arguments={"command": "make test"}),
    p.ToolProgress(call_id="c1", content="compiling…\n"),
]
_ENDING: list[p.Event] = [
    p.ToolResult(call_id="c1", name="shell", status="success", output="ok: 12 tests", duration_ms=850),
    p.Step(name="build", status="completed", duration_ms=900),
    p.Message(
        message_id="m1", role="assistant", content="Reading the code now.\n\n- **two** fixes\n- `one` test"
    ),
    p.Error(code="TOOL_FAILED", message="lint failed", recoverable=True, fix="run ruff --fix"),
    p.Result(
        ok=True,
        subtype="success",
        exit_code=0,
        result="Fixed **both** bugs.",
        next_actions=[p.NextAction(command="agentstream follow <run_id>", description="replay it")],
    ),
]
"""A run in the three parts it arrives in while live (their first seqs: 0, 2, 6)."""


def test_a_live_run_shows_its_text_while_it_runs_then_its_final_answer(
    browser: Any, server: Server, bus_url: str
) -> None:
    run_id = "live-run"
    publish(bus_url, run_id, _OPENING)
    browser.get(f"{server.base}/runs/{run_id}")
    wait_for(lambda: "Reading the" in _text_of(browser, "#timeline"), what="the first delta")
    publish(bus_url, run_id, _WORKING, first_seq=2)
    wait_for(lambda: "compiling…" in _text_of(browser, "#timeline"), what="the tool's streamed output")
    assert "Reading the code now" in _text_of(browser, "#timeline")
    assert "make test" in _text_of(browser, ".tool-args") and "running…" in _text_of(browser, ".tool-state")
    assert _js(browser, "return document.querySelector('#result') === null")

    publish(bus_url, run_id, _ENDING, first_seq=6)
    wait_for(lambda: _text_of(browser, "#result"), what="the final result")
    assert "Fixed both bugs." in _text_of(browser, "#result .final-answer")
    assert _text_of(browser, "#result .final-answer strong") == "both"
    assert "agentstream follow <run_id>" in _text_of(browser, "#result .next-actions")
    assert _text_of(browser, ".message li strong") == "two"
    assert "success · 850 ms" in _text_of(browser, ".tool-state") and "ok: 12 tests" in _text_of(
        browser, ".tool-output"
    )
    assert "exit 0" in _text_of(browser, "#result") and " ms" not in _text_of(browser, "#result .muted")
    assert _js(browser, "return document.querySelector('.step progress').value") == 1
    assert "fix: run ruff --fix" in _text_of(browser, ".event.error")
    seqs = _js(
        browser, "return [...document.querySelectorAll('#timeline [data-seq]')].map(n => n.dataset.seq)"
    )
    assert len(seqs) == len(set(seqs))


def test_a_duration_the_input_did_not_give_is_not_shown_as_zero(
    browser: Any, server: Server, bus_url: str
) -> None:
    """A duration of 0 (what a reader writes when its input gave none) is left out; one that was given is shown."""
    calls = [p.ToolCall(call_id=f"c{n}", name="shell", arguments={}) for n in (1, 2)]
    results = [
        p.ToolResult(call_id="c1", name="shell", status="success", output="done"),
        p.ToolResult(call_id="c2", name="shell", status="error", error="no", duration_ms=40),
    ]
    _finished(bus_url, "no-durations", p.Start(command="exec"), *calls, *results, duration_ms=1500)
    browser.get(f"{server.base}/runs/no-durations")
    wait_for(lambda: _text_of(browser, "#result"), what="the result")
    states = _js(browser, "return [...document.querySelectorAll('.tool-state')].map(n => n.textContent)")
    assert states == ["success", "error · 40 ms"]
    assert _text_of(browser, "#result .muted") == "exit 0 · 1.5 s"


def test_run_content_is_shown_as_text_and_never_runs(browser: Any, server: Server, bus_url: str) -> None:
    run_id = f"xss {XSS_IMG}"  # the run id is untrusted too
    publish(
        bus_url,
        run_id,
        [
            p.Start(command=f"exec {XSS_SCRIPT}"),
            p.Message(
                message_id="m",
                role="assistant",
                content=f"Look: {XSS_IMG} and {XSS_SCRIPT} [x](javascript:alert(1)) **{XSS_IMG}**",
            ),
            p.ToolCall(call_id="c", name=XSS_IMG, arguments={"html": XSS_SCRIPT}),
            p.ToolResult(call_id="c", name="t", status="success", output=f"{XSS_SCRIPT}\n{XSS_IMG}"),
            p.Result(
                ok=False,
                subtype="error",
                exit_code=1,
                result=XSS_IMG,
                error=p.ErrorInfo(code="X", message=XSS_SCRIPT),
            ),
        ],
    )
    browser.get(f"{server.base}/runs/{quote(run_id, safe='')}")
    wait_for(lambda: _text_of(browser, "#result"), what="the run to render")
    main = _text_of(browser, "main")
    assert main.count(XSS_IMG) >= 4 and main.count(XSS_SCRIPT) >= 3
    assert _js(browser, "return document.querySelectorAll('main img, main script, main iframe').length") == 0
    assert _js(browser, "return document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
    assert _js(browser, "return window.__pwned === undefined")
    browser.get(f"{server.base}/")
    wait_for(lambda: _js(browser, "return document.querySelectorAll('tbody tr').length > 0"), what="the list")
    time.sleep(0.2)  # let an onerror handler fire, were one ever attached
    assert XSS_SCRIPT in _text_of(browser, "tbody")
    assert _js(browser, "return document.querySelectorAll('main img, main script').length") == 0
    assert _js(browser, "return window.__pwned === undefined")


def test_the_page_resumes_after_a_dropped_connection_without_losing_or_repeating_events(
    browser: Any, server: Server, bus_url: str
) -> None:
    run_id = "dropped-run"
    publish(bus_url, run_id, [p.Start(command="exec long"), p.Log(level="info", message="before the drop")])
    browser.get(f"{server.base}/runs/{run_id}")
    wait_for(lambda: "before the drop" in _text_of(browser, "#timeline"), what="the first events")
    port = server.port
    server.stop()  # every connection drops
    publish(bus_url, run_id, [p.Log(level="info", message=f"while down {n}") for n in range(3)], first_seq=2)
    server.port = port
    server.start()  # same port: the page's EventSource reconnects with Last-Event-ID
    publish(
        bus_url,
        run_id,
        [p.Log(level="info", message="after"), p.Result(ok=True, subtype="success", exit_code=0)],
        first_seq=5,
    )
    wait_for(lambda: _text_of(browser, "#result"), timeout=20, what="the run's end after reconnecting")
    seqs = _js(
        browser,
        "return [...document.querySelectorAll('#timeline [data-seq]')].map(n => Number(n.dataset.seq))",
    )
    assert seqs == list(range(7))


def test_screenshot_of_the_run_page_for_the_docs(
    browser: Any, server: Server, bus_url: str, tmp_path: Path
) -> None:
    """The page renders to a real image (docs/serve-run-page.png is taken the same way)."""
    publish(bus_url, "pictured-run", [*_OPENING, *_WORKING, *_ENDING])
    browser.get(f"{server.base}/runs/pictured-run")
    wait_for(lambda: _text_of(browser, "#result"), what="the run page")
    shot = tmp_path / "run.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _finished(bus_url: str, run_id: str, *events: p.Event, duration_ms: int = 0) -> None:
    publish(
        bus_url, run_id, [*events, p.Result(ok=True, subtype="success", exit_code=0, duration_ms=duration_ms)]
    )


def test_a_line_of_many_code_spans_renders_without_freezing_the_page(
    browser: Any, server: Server, bus_url: str
) -> None:
    # Quadratic rendering took ~2.6 s for 40k spans in Chromium 156, so 150k: well past the timeout.
    spans = 150_000
    _finished(bus_url, "many-spans", p.Message(message_id="m", role="assistant", content="`a`" * spans))
    browser.get(f"{server.base}/runs/many-spans")
    _wait_for_page(lambda: _text_of(browser, "#result"), what="the run to render")
    assert _js(browser, "return document.querySelectorAll('.message .content code').length") == spans


def test_a_deeply_nested_quote_is_shown(browser: Any, server: Server, bus_url: str) -> None:
    _finished(
        bus_url, "deep-quote", p.Message(message_id="m", role="assistant", content=">" * 20_000 + " deep")
    )
    browser.get(f"{server.base}/runs/deep-quote")
    wait_for(lambda: _text_of(browser, "#result"), what="the run to render")
    assert "deep" in _text_of(browser, ".message .content")
    assert _js(browser, "return document.querySelectorAll('.message .content blockquote').length") > 1


def test_a_result_that_fails_to_render_is_shown_as_text_and_still_ends_the_stream(
    browser: Any, server: Server, bus_url: str
) -> None:
    run_id = "render-bug"
    publish(bus_url, run_id, [p.Start(command="exec buggy")])
    browser.get(f"{server.base}/runs/{run_id}")
    wait_for(lambda: "started" in _text_of(browser, "#timeline"), what="the first event")
    _js(browser, "Markdown.render = () => { throw new Error('renderer bug'); };")  # a rendering bug
    publish(
        bus_url, run_id, [p.Result(ok=True, subtype="success", exit_code=0, result="the answer")], first_seq=1
    )
    # "finished" is shown right after the EventSource is closed (else: "reconnecting…" forever).
    wait_for(lambda: _text_of(browser, "#connection") == "finished", what="the stream to end")
    assert "the answer" in _text_of(browser, ".event.unrendered")
    assert _js(browser, "return document.querySelector('.event.unrendered').dataset.seq") == "1"


def test_an_unknown_run_says_so_and_is_followed_once_it_appears(
    browser: Any, server: Server, bus_url: str
) -> None:
    """A producer prints its run id before its first event is on the bus: a page opened from it waits."""
    browser.get(f"{server.base}/runs/not-yet")
    waiting = "no such run on this bus yet: waiting for it…"
    wait_for(lambda: _text_of(browser, "#connection") == waiting, what="the not-found state")
    assert "RUN_NOT_FOUND" in _text_of(browser, ".summary")
    time.sleep(0.5)  # the page's event stream has met its 404 too
    publish(bus_url, "not-yet", [p.Start(command="exec late"), p.Log(level="info", message="here now")])
    wait_for(lambda: "here now" in _text_of(browser, "#timeline"), what="the run's events, without a reload")
    assert "running" in _text_of(browser, ".summary")
    publish(bus_url, "not-yet", [p.Result(ok=True, subtype="success", exit_code=0)], first_seq=2)
    wait_for(lambda: _text_of(browser, "#connection") == "finished", what="the run's end")


def test_a_malformed_run_address_shows_an_error(browser: Any, server: Server) -> None:
    browser.get(f"{server.base}/runs/%E0%A4%A")
    wait_for(lambda: "Bad run address" in _text_of(browser, "main"), what="the error")
    assert "Loading" not in _text_of(browser, "main")
    assert "%E0%A4%A" in _text_of(browser, "main .error-text")


def test_only_known_roles_become_a_class(browser: Any, server: Server, bus_url: str) -> None:
    _finished(
        bus_url,
        "odd-role",
        p.Message(message_id="m1", role="assistant streaming result", content="odd"),  # type: ignore[arg-type]
        p.Message(message_id="m2", role="user", content="known"),
    )
    browser.get(f"{server.base}/runs/odd-role")
    wait_for(lambda: _text_of(browser, "#result"), what="the run to render")
    classes = _js(browser, "return [...document.querySelectorAll('.message')].map(n => n.className)")
    assert classes == ["message role-other", "message role-user"]
    assert _text_of(browser, ".message .role") == "assistant streaming result"


def test_thousands_of_streamed_pieces_render_without_freezing_the_page(
    browser: Any, server: Server, bus_url: str
) -> None:
    # Rewriting the whole text for each piece took 47 s for these tool lines and crashed the tab
    # for 40k deltas in Chromium 156; appending each piece takes about a second for all of them.
    pieces = 20_000
    line = "z" * 199 + "\n"
    _finished(
        bus_url,
        "many-pieces",
        p.ToolCall(call_id="c", name="shell", arguments={}),
        *[p.ToolProgress(call_id="c", content=line) for _ in range(pieces)],
        *[p.MessageDelta(message_id="m", content="word ") for _ in range(pieces)],
        *[p.ReasoningDelta(reasoning_id="r", content="hmm ") for _ in range(pieces)],
    )
    browser.get(f"{server.base}/runs/many-pieces")
    _wait_for_page(lambda: _text_of(browser, "#result"), what="the run to render")
    lengths = _js(
        browser,
        "return ['.tool-output', '.message .content', '.reasoning .plain']"
        ".map(s => document.querySelector(s).textContent.length)",
    )
    assert lengths == [pieces * len(line), pieces * len("word "), pieces * len("hmm ")]


_DISGUISED = "rm -rf ~ #\u202etxt.elif\u202c"
"""A command that a right-to-left override shows as ending in "file.txt"."""


def test_bidi_overrides_and_control_characters_show_as_what_they_are(
    browser: Any, server: Server, bus_url: str
) -> None:
    colored = "\x1b[1;31mFAILED\x1b[0m test_x\x07\x00"
    _finished(
        bus_url,
        "disguised",
        p.Start(command=f"exec {_DISGUISED}"),
        p.Message(message_id="m", role="assistant", content=f"Run `{_DISGUISED}` then **{_DISGUISED}**"),
        p.ToolCall(call_id="c", name="shell", arguments={"command": _DISGUISED}),
        p.ToolProgress(call_id="c", content=colored),
        p.ToolResult(call_id="c", name="shell", status="error", output=colored, error=_DISGUISED),
        p.MessageDelta(message_id="m2", content=_DISGUISED),
        p.Log(level="info", message=colored),
    )
    browser.get(f"{server.base}/runs/disguised")
    wait_for(lambda: _text_of(browser, "#result"), what="the run to render")
    text = _text_of(browser, "main")
    hidden = sorted(
        {f"U+{ord(char):04X}" for char in text if char in "\u202a\u202b\u202c\u202d\u202e\x1b\x07\x00"}
    )
    assert hidden == [], hidden
    shown = "rm -rf ~ #\u27e8U+202E\u27e9txt.elif\u27e8U+202C\u27e9"
    assert text.count(shown) >= 5 and "FAILED test_x\u27e8U+0007\u27e9\u27e8U+0000\u27e9" in _text_of(
        browser, ".tool-output"
    )
    assert "[1;31m" not in text


def test_with_a_token_the_login_form_lets_the_browser_in_and_the_run_streams(
    browser: Any, bus_url: str
) -> None:
    publish(bus_url, "behind-token", [p.Start(command="exec guarded"), p.Log(level="info", message="inside")])
    with Server(bus_url, "--token", "s3cret") as guarded:
        browser.get(f"{guarded.base}/runs/behind-token")
        wait_for(lambda: _js(browser, "return !!document.getElementById('token')"), what="the token form")
        assert _js(browser, "return document.getElementById('refused').hidden") is True
        _js(
            browser,
            "document.getElementById('token').value = 'wrong'; document.querySelector('form').submit();",
        )
        wait_for(lambda: _js(browser, "return !!document.getElementById('token')"), what="the form again")
        assert "FORBIDDEN" not in _text_of(browser, "body")
        assert _js(browser, "return document.getElementById('refused').hidden") is False
        _js(
            browser,
            "document.getElementById('token').value = 's3cret'; document.querySelector('form').submit();",
        )
        wait_for(lambda: "inside" in _text_of(browser, "#timeline"), what="the run, streaming")
        assert browser.current_url == f"{guarded.base}/runs/behind-token"
        publish(bus_url, "behind-token", [p.Result(ok=True, subtype="success", exit_code=0)], first_seq=2)
        wait_for(lambda: _text_of(browser, "#connection") == "finished", what="the run's end")


def test_underscores_inside_words_and_code_are_not_emphasis(
    browser: Any, server: Server, bus_url: str
) -> None:
    text = "Set window.__a=1 and window.__b=2 in snake__case__name; __init__.py and __real__ are bold."
    _finished(bus_url, "underscores", p.Message(message_id="m", role="assistant", content=text))
    browser.get(f"{server.base}/runs/underscores")
    wait_for(lambda: _text_of(browser, "#result"), what="the run to render")
    strong = _js(browser, "return [...document.querySelectorAll('.message strong')].map(n => n.textContent)")
    assert strong == ["init", "real"]
    assert "window.__a=1 and window.__b=2 in snake__case__name" in _text_of(browser, ".message .content")


_QUIET_CLAUDE = (
    "import json, time; print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 's', "
    "'model': 'm', 'tools': [], 'cwd': '/'}), flush=True); time.sleep(120)"
)
"""A Claude Code stream that starts, then goes quiet (a long model call)."""


def test_the_run_list_shows_a_run_whose_producer_was_killed_as_ended(browser: Any, bus_url: str) -> None:
    """Nobody follows the run: the list, polled by the open page, is what sees its producer gone."""
    lost_after = {"AGENTSTREAM_BUS_LOST_AFTER": "2"}
    with Server(bus_url, env=lost_after) as watching:
        wrap = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentstream",
                "wrap",
                "--bus",
                bus_url,
                "--",
                sys.executable,
                "-c",
                _QUIET_CLAUDE,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **lost_after},
            start_new_session=True,
        )
        try:
            assert wrap.stdout is not None
            run_id = json.loads(wrap.stdout.readline())["session_id"]
            browser.get(f"{watching.base}/")
            row = f"tr[data-run-id={json.dumps(run_id)}] .badge"
            wait_for(lambda: _text_of(browser, row) == "running", what="the run, running, in the list")
            time.sleep(3)  # past the lost-after time, the producer still touching its quiet run
            assert _text_of(browser, row) == "running"
        finally:
            os.killpg(wrap.pid, signal.SIGKILL)  # the producer and its CLI, as when their machine dies
            wrap.wait()
        wait_for(lambda: _text_of(browser, row) == "failed", timeout=20, what="the lost run shown as ended")
    with open_bus(bus_url) as bus:
        last = bus.read(run_id, bus.get_run(run_id).last_seq)[0]  # type: ignore[union-attr]
    assert json.loads(last.line)["subtype"] == "producer_lost"


def test_more_live_runs_than_the_browser_has_connections_each_stream_in_their_tab(
    browser: Any, server: Server, bus_url: str
) -> None:
    """A browser opens at most six connections to one server, and a live run's page holds one: a tab that is
    not shown lets its stream go, and takes it up where it stopped once shown again. Eight runs in eight tabs
    each load, stream, and show every event once."""
    runs = [f"tabbed-run-{n}" for n in range(8)]
    first_tab, tabs = browser.current_window_handle, []
    browser.set_page_load_timeout(20)  # a page stuck behind six held connections fails here, not in 300 s
    try:
        for run_id in runs:
            publish(
                bus_url,
                run_id,
                [p.Start(command="exec live"), p.Log(level="info", message=f"{run_id} began")],
            )
            browser.switch_to.new_window("tab")
            tabs.append(browser.current_window_handle)
            browser.get(f"{server.base}/runs/{run_id}")
            wait_for(
                lambda run_id=run_id: f"{run_id} began" in _text_of(browser, "#timeline"),
                what=f"{run_id}'s first events",
            )
        for run_id in runs:  # they go on while all but the last tab are hidden
            ending = [
                p.Log(level="info", message=f"{run_id} went on"),
                p.Result(ok=True, subtype="success", exit_code=0),
            ]
            publish(bus_url, run_id, ending, first_seq=2)
        for run_id, tab in zip(runs, tabs, strict=True):
            browser.switch_to.window(tab)
            wait_for(lambda: _text_of(browser, "#result"), what=f"{run_id}'s end once its tab is shown")
            assert f"{run_id} went on" in _text_of(browser, "#timeline")
            seqs = _js(
                browser,
                "return [...document.querySelectorAll('#timeline [data-seq]')].map(n => Number(n.dataset.seq))",
            )
            assert seqs == [0, 1, 2, 3]
    finally:
        browser.set_page_load_timeout(300)
        for tab in tabs:
            browser.switch_to.window(tab)
            browser.close()
        browser.switch_to.window(first_tab)
