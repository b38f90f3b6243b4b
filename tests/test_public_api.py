"""The package's public surface: every name in ``__all__`` resolves, and nothing else is public."""

from __future__ import annotations

import inspect
import subprocess
import sys

import agentstream


def test_every_public_name_resolves() -> None:
    for name in agentstream.__all__:
        assert getattr(agentstream, name) is not None, name


def test_read_is_the_function_not_a_module() -> None:
    from agentstream import read, spawn

    assert inspect.isfunction(read) and inspect.isfunction(spawn)


def test_nothing_else_is_public() -> None:
    public = {name for name in dir(agentstream) if not name.startswith("_")}
    assert public == set(agentstream.__all__) - {"__version__"}


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        agentstream.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_import_is_cheap() -> None:
    code = "import sys, agentstream; print(sorted(m for m in ('msgspec', 'agentstream.stream', 'agentstream.consumer') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_all_is_the_lazy_names_and_the_version() -> None:
    """``__all__`` is written out (type checkers read it); it must list exactly what resolves lazily."""
    assert set(agentstream.__all__) == {*agentstream._LAZY, "__version__"}
    assert len(agentstream.__all__) == len(set(agentstream.__all__))


def test_spawning_is_exported_without_importing_what_only_spawning_needs() -> None:
    """Reading a file (``convert``, ``validate``) pays for neither subprocess and threading nor asyncio."""
    code = (
        "import sys, agentstream.consumer; "
        "print(sorted(m for m in ('asyncio', 'subprocess', 'threading', 'selectors') if m in sys.modules)); "
        "from agentstream import aspawn, AsyncSpawn, spawn, Spawn; "
        "print(aspawn.__module__, AsyncSpawn.__name__, spawn.__module__, Spawn.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "[]",
        "agentstream.consumer.async_process AsyncSpawn agentstream.consumer.process Spawn",
    ]
