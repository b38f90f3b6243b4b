"""The dialect examples of docs/plugins.md and of the kit's docstring work as written, as installed plugins.

Each example's code is taken from the page as it is, put in a package with the
``*.dist-info`` an installer writes, and its streams must pass ``agentstream validate``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOY_STREAM = (
    b'{"type":"said","id":"a1","text":"hi","toy_version":1}\n'
    b'{"type":"said","id":"a2","text":"there"}\n'
    b'{"type":"done","ok":true}\n'
)


def _docs_example() -> str:
    page = (ROOT / "docs" / "plugins.md").read_text()
    section = page[page.index("## A dialect") : page.index("## A provider")]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None
    return found.group(1)


def _kit_example() -> str:
    docstring = ast.get_docstring(ast.parse((ROOT / "src/agentstream/dialects/kit.py").read_text())) or ""
    block = docstring.split("A minimal dialect::", 1)[1].split("What is here", 1)[0]
    return textwrap.dedent(block)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("example-plugins")
    (root / "docs_example.py").write_text(_docs_example())
    (root / "kit_example.py").write_text(_kit_example().replace('"toy"', '"kittoy"'))
    info = root / "agentstream_examples-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agentstream-examples\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[agentstream.dialects]\ntoy = docs_example:DIALECT\nkittoy = kit_example:DIALECT\n"
    )
    return root


def run(site: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    path = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    return subprocess.run(
        [sys.executable, "-m", "agentstream", *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("dialect", ["toy", "kittoy"])
def test_the_documented_dialect_reads_and_writes_valid_streams(site: Path, dialect: str) -> None:
    read = run(site, "validate", "--from", dialect, "-", stdin=TOY_STREAM)
    assert read.returncode == 0, read.stdout + read.stderr
    assert b"valid" in read.stdout + read.stderr and b"violation" not in read.stdout + read.stderr
    written = run(site, "exec", "--provider", "demo", "--dialect", dialect, "hi")
    assert b'"done"' in written.stdout.splitlines()[-1]  # the encoder writes the result too
    again = run(site, "validate", "--from", dialect, "-", stdin=written.stdout)
    assert again.returncode == 0, again.stdout + again.stderr
    assert b"violation" not in again.stdout + again.stderr
