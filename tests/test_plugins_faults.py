"""Plugins that are wrong in the ways a plugin can be: each is named, with its distribution and a fix.

A scratch directory on ``PYTHONPATH`` holds one package and the ``*.dist-info`` an
installer would write for it (agentstream reads entry points from that metadata),
so each case is a real entry point of a real installed distribution.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

DISTRIBUTION = "agentstream-faulty"

PACKAGE = '''
from agentstream import Message, Result
from agentstream.bus import Bus
from agentstream.bus.sqlite import open_sqlite
from agentstream.dialects.base import Dialect, DialectDecoder, DialectEncoder

class Decoder(DialectDecoder):
    def decode_object(self, obj):
        if "said" in obj:
            self.emit(Message(message_id="m1", role="assistant", content=obj["said"]))

class StrEncoder(DialectEncoder):
    def encode(self, event):
        return ['{"said": "text, not bytes"}'] if isinstance(event, (Message, Result)) else []

class Base(Dialect):
    summary = "a faulty plugin's dialect"
    def sniff(self, obj): return 0.0
    def decoder(self, session_id=None): return Decoder(session_id)
    def encoder(self): return StrEncoder()

class Boom(Base):
    name = "boom"
    def sniff(self, obj): raise KeyError("sniff exploded")
    def sniff_document(self, document): raise KeyError("sniff_document exploded")

class Misnamed(Base):
    name = "claude"  # under the entry point 'misnamed'
    def sniff(self, obj): return 1.0 if "said" in obj else 0.0

class NoSummary(Dialect):
    name = "nosummary"
    def sniff(self, obj): return 0.0
    def decoder(self, session_id=None): return Decoder(session_id)
    def encoder(self): return StrEncoder()

class StrOut(Base):
    name = "strout"

BOOM, MISNAMED, NOSUMMARY, STROUT = Boom(), Misnamed(), NoSummary(), StrOut()

class UrlLess(Bus):
    """Every abstract method, delegated to the SQLite bus; no ``url``."""
    def __init__(self, inner): self._b = inner
    def append(self, run_id, records, *, if_next_seq=None): return self._b.append(run_id, records, if_next_seq=if_next_seq)
    def read(self, run_id, from_seq=0, *, limit=1000, block=None): return self._b.read(run_id, from_seq, limit=limit, block=block)
    def get_run(self, run_id): return self._b.get_run(run_id)
    def list_runs(self, *, statuses=(), limit=50): return self._b.list_runs(statuses=statuses, limit=limit)
    def register_run(self, run_id, *, command, job_id=None, attempt=None): return self._b.register_run(run_id, command=command, job_id=job_id, attempt=attempt)
    def feed_end(self): return self._b.feed_end()
    def read_feed(self, cursor, *, limit=1000, block=None): return self._b.read_feed(cursor, limit=limit, block=block)
    def enqueue(self, job): return self._b.enqueue(job)
    def claim(self, worker, *, idle_timeout, block=0.0): return self._b.claim(worker, idle_timeout=idle_timeout, block=block)
    def heartbeat(self, claim): return self._b.heartbeat(claim)
    def retry_job(self, claim): return self._b.retry_job(claim)
    def finish_job(self, claim, status): return self._b.finish_job(claim, status)
    def get_job(self, job_id): return self._b.get_job(job_id)
    def close(self): self._b.close()

def url_less(url, *, retention, maxlen, connect_timeout):
    return UrlLess(open_sqlite("sqlite:" + url.partition(":")[2], retention=retention, maxlen=maxlen,
                               connect_timeout=connect_timeout))

def bus_none(url, *, retention, maxlen, connect_timeout): return None
def bus_raises(url, *, retention, maxlen, connect_timeout): raise ValueError("bus factory exploded")

from agentstream.agent.providers.base import Provider, TextDelta, TurnEnd
from agentstream.agent.tools import Tool, ToolOutcome, ToolSpec

def provider_none(settings): return None
def provider_raises(settings): raise RuntimeError("provider factory exploded")

class NotAProvider:
    def __init__(self, settings): pass

class YieldsJunk(Provider):
    name = "junky"
    def __init__(self, settings): super().__init__("junk-1")
    def _turn(self, conversation, tools, system):
        yield TextDelta("fine so far")
        yield {"text": "a dict, not a turn event"}
        yield TurnEnd("end_turn")

def peek(arguments, context): return ToolOutcome("success", "peeked")
def spec(name, access="read"): return ToolSpec(name, "look", {"type": "object", "properties": {}}, access)
SHADY_ACCESS = Tool(spec("peek", access="readonly"), peek)
SPACED_NAME = [Tool(spec("peek at"), peek)]
GOOD_TOOL = Tool(spec("peek_ok"), peek)
'''

MODULES = {
    "exits.py": 'import sys\nsys.exit("faulty: optional dependency foo missing")\n',
    "norun.py": 'SUMMARY = "no run here"\ndef configure(parser): pass\n',
    "retnone.py": 'SUMMARY = "returns None"\ndef configure(parser): pass\ndef run(args): print("ran")\n',
    "nosum.py": "import argparse\ndef configure(parser): pass\ndef run(args): return 0\n",
}

ENTRY_POINTS = """
[agentstream.dialects]
boom = faulty:BOOM
misnamed = faulty:MISNAMED
nosummary = faulty:NOSUMMARY
strout = faulty:STROUT
classy = faulty:StrOut
exits = faulty.exits:DIALECT

[agentstream.commands]
exits = faulty.exits
norun = faulty.norun
retnone = faulty.retnone
nosum = faulty.nosum

[agentstream.bus]
urlless = faulty:url_less
busnone = faulty:bus_none
busraise = faulty:bus_raises

[agentstream.providers]
pnone = faulty:provider_none
praise = faulty:provider_raises
pclass = faulty:NotAProvider
pjunk = faulty:YieldsJunk

[agentstream.tools]
shady = faulty:SHADY_ACCESS
spaced = faulty:SPACED_NAME
good = faulty:GOOD_TOOL
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the ``faulty`` package and its installed metadata."""
    root = tmp_path_factory.mktemp("faulty-plugin")
    package = root / "faulty"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    for name, text in MODULES.items():
        (package / name).write_text(text)
    info = root / "agentstream_faulty-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def run(
    site: Path, *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH")))),
    }
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr


def reported(done: subprocess.CompletedProcess[str], plugin: str) -> list[str]:
    """The stderr lines that speak of ``plugin``; each names the distribution and has a fix."""
    lines = [line for line in done.stderr.splitlines() if f"'{plugin}'" in line]
    for line in lines:
        assert DISTRIBUTION in line and "fix:" in line, line
    return lines


def test_a_sniff_that_raises_is_reported_once_and_detection_goes_on(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "claude.ndjson"
    source.write_text('{"type":"system","subtype":"init","session_id":"s","model":"m","tools":[]}\n')
    done = run(site, "convert", str(source))
    no_traceback(done)
    assert done.returncode == 0
    assert '"type":"start"' in done.stdout
    lines = reported(done, "boom")
    assert len(lines) == 1 and "sniff exploded" in lines[0] and "skipped" in lines[0]
    document = tmp_path / "doc.json"
    document.write_text('{"not": "anyone\'s"}')
    done = run(site, "convert", str(document))
    no_traceback(done)
    assert len(reported(done, "boom")) == 1


def test_a_plugin_that_exits_on_import_is_a_load_failure(site: Path) -> None:
    done = run(site, "--help")
    assert done.returncode == 0 and "commands:" in done.stdout
    assert any("SystemExit" in line and "foo missing" in line for line in reported(done, "exits"))
    listed = run(site, "dialects")
    assert listed.returncode == 0 and "exits" in listed.stdout
    named = run(site, "exits")
    assert named.returncode == 2
    assert "failed to load (SystemExit: faulty: optional dependency foo missing)" in named.stderr
    assert "unknown command" not in named.stderr


def test_a_dialect_without_summary_is_listed_and_reported(site: Path) -> None:
    done = run(site, "dialects")
    no_traceback(done)
    assert done.returncode == 0
    row = next(line for line in done.stdout.splitlines() if line.startswith("nosummary "))
    assert "(no summary)" in row
    assert any("has no summary" in line for line in reported(done, "nosummary"))
    failed = next(line for line in done.stdout.splitlines() if line.startswith("classy "))
    assert "(failed to load" in failed and "read only" not in failed


def test_a_dialect_named_otherwise_than_its_entry_point_is_refused(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "said.ndjson"
    source.write_text('{"said": "hello"}\n')
    done = run(site, "convert", str(source))
    no_traceback(done)
    assert "unknown dialect" not in done.stderr
    assert any("its name is 'claude'" in line for line in reported(done, "misnamed"))
    assert '"content":"hello"' not in done.stdout  # not detected, nor decoded by the built-in claude


def test_a_plugin_that_failed_is_named_not_unknown_nor_offered(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "x.ndjson"
    source.write_text("{}\n")
    done = run(site, "convert", "--from", "classy", str(source))
    assert done.returncode == 2
    assert "unknown dialect" not in done.stderr
    assert f"dialect 'classy' from the plugin '{DISTRIBUTION}' is not a dialect" in done.stderr
    assert "expected an instance of agentstream.dialects.base.Dialect, got the class StrOut" in done.stderr
    assert "fix:" in done.stderr
    unknown = run(site, "convert", "--from", "nope", str(source))
    fix = unknown.stderr.split("fix: use one of:")[1]
    assert "strout" in fix and "classy" not in fix and "exits" not in fix and "misnamed" not in fix
    command = run(site, "norun")
    assert command.returncode == 2 and "did you mean" not in command.stderr
    assert "expected a module with configure(parser) and run(args) -> int" in command.stderr
    assert "without run()" in command.stderr and "fix:" in command.stderr
    near = run(site, "norunn")
    assert "did you mean 'norun'" not in near.stderr


def test_wrong_returns_are_errors_naming_the_plugin(site: Path) -> None:
    done = run(site, "retnone")
    no_traceback(done)
    assert done.returncode == 1
    assert f"command 'retnone' from the plugin '{DISTRIBUTION}' returned None from run()" in done.stderr
    demo = run(site, "demo")
    converted = run(site, "convert", "--to", "strout", "-", stdin=demo.stdout.encode())
    no_traceback(converted)
    assert converted.returncode == 1
    assert (
        f"dialect 'strout' from the plugin '{DISTRIBUTION}' returned a list holding a str" in converted.stderr
    )
    # The producer cannot end its stream either: said, once.
    written = run(site, "demo", "--dialect", "strout")
    no_traceback(written)
    assert written.returncode == 1 and "returned a list holding a str" in written.stderr


def test_a_bus_backend_without_url_serves_and_a_broken_factory_is_named(site: Path, tmp_path: Path) -> None:
    bus = f"urlless://{tmp_path / 'bus.sqlite3'}"
    sent = run(site, "send", "deploy/finished", "--data", "{}", "--bus", bus)
    assert sent.returncode == 0, sent.stderr
    served = run(
        site, "serve", "--bus", bus, "--host", "256.0.0.1", "--token", "t"
    )  # the bus opens, then listening fails
    no_traceback(served)
    assert served.returncode == 2 and "cannot listen" in served.stderr
    for scheme, what in (("busnone", "returned None"), ("busraise", "ValueError: bus factory exploded")):
        done = run(site, "runs", "--bus", f"{scheme}:///{tmp_path / 'x'}")
        no_traceback(done)
        assert done.returncode != 0
        error = msgspec.json.decode(done.stdout.splitlines()[-1])
        assert f"bus backend '{scheme}' from the plugin '{DISTRIBUTION}'" in error["error"]["message"]
        assert what in error["error"]["message"] and DISTRIBUTION in error["fix"]
    unsupported = run(site, "runs", "--bus", "nope:///x")
    assert "urlless://" in unsupported.stderr


def test_completion_offers_plugin_commands_and_only_usable_dialects(site: Path) -> None:
    done = run(site, "completion", "bash")
    assert done.returncode == 0
    script = done.stdout
    assert " retnone " in script.split("compgen -W")[1].split("\n")[0]
    reading = next(line for line in script.splitlines() if "convert:--from)" in line)
    assert "classy" not in reading and "exits" not in reading and "strout" in reading


def test_a_command_without_summary_is_reported(site: Path) -> None:
    done = run(site, "--help")
    row = next(line for line in done.stdout.splitlines() if line.strip().startswith("nosum "))
    assert "(no summary)" in row
    assert any("has no SUMMARY" in line for line in reported(done, "nosum"))


def test_a_provider_that_cannot_be_made_or_yields_junk_ends_the_run_naming_the_plugin(
    site: Path, tmp_path: Path
) -> None:
    """A factory that raises or returns no Provider, or a provider yielding what is no turn event: a whole
    stream ending in PROVIDER_ERROR that names the plugin, not a traceback nor retries of a "cut" stream."""
    cases = {
        "pnone": "its factory returned None",
        "praise": "could not be created (RuntimeError: provider factory exploded)",
        "pclass": "its factory returned a NotAProvider",
        "pjunk": "yielded a dict, not a turn event",
    }
    for name, said in cases.items():
        done = run(site, "exec", "--provider", name, "hello", cwd=tmp_path)
        no_traceback(done)
        assert done.returncode == 1, (name, done.stderr)
        events = [msgspec.json.decode(line) for line in done.stdout.splitlines()]
        assert [events[0]["type"], events[-1]["type"]] == ["start", "result"], name
        error = events[-1]["error"]
        assert error["code"] == "PROVIDER_ERROR" and said in error["message"], (name, error)
        assert not any(e["type"] == "error" and e["recoverable"] for e in events), name  # no retries
        if name != "pjunk":
            assert f"provider {name!r} from the plugin {DISTRIBUTION!r}" in error["message"]
            assert f"pip uninstall {DISTRIBUTION}" in error["fix"]


def test_a_toolset_a_provider_would_refuse_or_never_offer_is_skipped_and_named(
    site: Path, tmp_path: Path
) -> None:
    done = run(site, "exec", "--provider", "demo", "hello", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0
    start = msgspec.json.decode(done.stdout.splitlines()[0])
    assert "peek_ok" in start["tools"] and "peek" not in start["tools"] and "peek at" not in start["tools"]
    (shady,) = reported(done, "shady")
    assert "access 'readonly', not one of read, write, execute" in shady
    (spaced,) = reported(done, "spaced")
    assert "named 'peek at'" in spaced
