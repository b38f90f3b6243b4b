"""Plugins: dialects, providers, bus backends, tools and commands, found by name.

Every kind is a :class:`Registry` over one entry-point group (:data:`GROUPS`).
The built-ins are declared in this package's ``pyproject.toml`` exactly like a
plugin's, and each registry also knows them statically (``name → "module:attr"``),
so ``agentstream --version`` or a built-in dialect reads no metadata at all;
``tests/test_plugins.py`` keeps the two lists equal. Other distributions' entry
points are read once per process, and only when a name is not built in or when
every name is listed. They are read straight from the ``*.dist-info`` and
``*.egg-info`` directories on ``sys.path`` (what pip, uv and setuptools install),
not through ``importlib.metadata``, whose import alone (``email``, ``zipfile``…)
would triple the time of ``agentstream --help``.

Names are unique per group. A plugin that reuses a built-in's name is ignored
(the built-in wins) and, between two plugins, the one found first on
``sys.path`` wins; either way the loser is reported once on stderr. A plugin
that fails to import, or exports the wrong kind of object, is reported once on
stderr with its distribution's name, what was expected and a fix, and skipped: a
broken plugin never breaks a command that does not need it, and a command that
names it says why it cannot be used rather than calling it unknown.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, NamedTuple, TypeVar

__all__ = [
    "GROUPS",
    "EntryPoint",
    "PluginProblem",
    "Registry",
    "describe",
    "installed_entry_points",
    "load_reference",
    "report_once",
]

T = TypeVar("T")

GROUPS: Final = (
    "agentstream.dialects",
    "agentstream.providers",
    "agentstream.bus",
    "agentstream.tools",
    "agentstream.commands",
)
"""The entry-point groups agentstream reads, one per kind of plugin (see docs/plugins.md)."""

_OWN_DISTRIBUTION: Final = "agentstream"
_reported: set[str] = set()


class EntryPoint(NamedTuple):
    """One declared plugin: its name in a group, the ``module:attribute`` it names, and who declared it."""

    name: str
    value: str
    distribution: str

    def load(self) -> Any:
        return load_reference(self.value)


class PluginProblem(NamedTuple):
    """Why a plugin cannot be used: one line naming it and its distribution, and what to do about it."""

    message: str
    fix: str


def load_reference(reference: str) -> Any:
    """Import ``"package.module:attribute"`` (or a bare module path), as an entry point's value is read."""
    module, _, attribute = reference.partition(":")
    value: Any = importlib.import_module(module.strip())
    for part in filter(None, attribute.strip().split(".")):
        value = getattr(value, part)
    return value


class Registry(Generic[T]):
    """The named objects of one entry-point ``group``: the built-ins first, then installed plugins.

    A plugin's object is checked when it loads: ``check(name, value)`` says what is
    wrong with it (``None`` when nothing is); a plain ``accepts(value)`` predicate,
    with ``expected`` saying what it wants, does for a kind with nothing more to say.
    An object that fails is reported and skipped. Loaded objects are cached for the process.
    """

    def __init__(
        self,
        group: str,
        builtins: Mapping[str, str],
        *,
        kind: str,
        accepts: Callable[[object], bool] | None = None,
        expected: str = "",
        check: Callable[[str, Any], str | None] | None = None,
    ) -> None:
        self.group = group
        self.kind = kind
        self._builtins = dict(builtins)
        self._accepts = accepts
        self._expected = expected
        self._check = check
        self._loaded: dict[str, T] = {}
        self._plugins: dict[str, EntryPoint] | None = None
        self._problems: dict[str, PluginProblem] = {}

    @property
    def builtin_names(self) -> tuple[str, ...]:
        """The built-in names, in their documented order, known without reading any metadata."""
        return tuple(self._builtins)

    @property
    def builtins(self) -> Mapping[str, str]:
        """Built-in name → ``"module:attribute"``, as ``pyproject.toml`` declares them too."""
        return dict(self._builtins)

    def names(self) -> tuple[str, ...]:
        """Every declared name: the built-ins, then the installed plugins' (reads entry points once).

        This includes plugins that fail to load; :meth:`usable_names` does not.
        """
        return (*self._builtins, *self._discover())

    def usable_names(self) -> tuple[str, ...]:
        """The names that load (each plugin is imported): what a message may offer as choices."""
        return tuple(self.load_all())

    def plugin_distribution(self, name: str) -> str | None:
        """The distribution that provides plugin ``name`` (``None`` for a built-in or an unknown name)."""
        if name in self._builtins:
            return None
        entry = self._discover().get(name)
        return entry.distribution if entry is not None else None

    def get(self, name: str, *, report: bool = True) -> T | None:
        """The object called ``name``; ``None`` when nothing by that name can be loaded.

        A built-in that fails to import raises (that is a bug or a broken install,
        not a plugin problem); a plugin that fails is reported once (unless ``report``
        is false: the caller makes :meth:`problem` its error) and gives ``None``.
        """
        if name in self._loaded:
            return self._loaded[name]
        if name in self._problems:
            return None  # failed before: not imported again
        reference = self._builtins.get(name)
        if reference is not None:
            value: T = load_reference(reference)
        else:
            entry = self._discover().get(name)
            if entry is None:
                return None
            loaded = self._load_plugin(name, entry, report)
            if loaded is None:
                return None
            value = loaded
        self._loaded[name] = value
        return value

    def load_all(self) -> dict[str, T]:
        """Every object that loads, by name, built-ins first."""
        found: dict[str, T] = {}
        for name in self.names():
            value = self.get(name)
            if value is not None:
                found[name] = value
        return found

    def problem(self, name: str) -> PluginProblem | None:
        """Why the plugin ``name`` cannot be used (it is loaded first), or ``None``: it loads, or none has that name."""
        if name not in self._builtins and name in self._discover():
            self.get(name, report=False)
        return self._problems.get(name)

    def missing(self, name: str) -> PluginProblem:
        """What to say of a ``name`` that gives no object: the plugin's own failure, else an unknown name."""
        return self.problem(name) or PluginProblem(
            f"unknown {self.kind} {name!r}", f"use one of: {', '.join(self.usable_names())}"
        )

    def reject(self, name: str, what: str, fix: str) -> None:
        """Drop the loaded plugin ``name`` for the rest of the process and report it once: ``what`` went wrong.

        For a fault found after loading (a method that raises, a wrong return type); ``fix`` says what to do.
        """
        entry = self._discover().get(name)
        if entry is None or name in self._builtins:
            return
        self._loaded.pop(name, None)
        self._fail(name, entry, what, fix)

    def where(self, name: str) -> str:
        """``"dialect 'x' from the plugin 'dist'"``: how messages name a plugin (a built-in by its name alone)."""
        distribution = self.plugin_distribution(name)
        plugin = f" from the plugin {distribution!r}" if distribution else ""
        return f"{self.kind} {name!r}{plugin}"

    def fix_for(self, name: str, change: str) -> str:
        """The fix of a plugin's fault: what its author must change, or what its user can do meanwhile."""
        distribution = self.plugin_distribution(name) or "agentstream"
        return f"{change}; meanwhile update it or uninstall it (pip uninstall {distribution})"

    def _load_plugin(self, name: str, entry: EntryPoint, report: bool = True) -> T | None:
        try:
            value: T = entry.load()
        except BaseException as exc:  # third-party code, even its sys.exit(): report it, carry on
            if _lets_through(exc):
                raise
            self._fail(
                name,
                entry,
                f"failed to load ({type(exc).__name__}: {exc})",
                f"update or reinstall {entry.distribution!r} (its entry point {name} = {entry.value}), "
                f"or uninstall it (pip uninstall {entry.distribution})",
                report,
            )
            return None
        fault = self._fault(name, value)
        if fault is not None:
            self._fail(
                name,
                entry,
                fault,
                f"{entry.distribution!r} must fix its entry point {name} = {entry.value}, "
                f"or be uninstalled (pip uninstall {entry.distribution})",
                report,
            )
            return None
        return value

    def _fault(self, name: str, value: object) -> str | None:
        """What is wrong with a plugin's loaded object, or ``None``."""
        if self._check is not None:
            return self._check(name, value)
        if self._accepts is not None and not self._accepts(value):
            expected = f"expected {self._expected}, got" if self._expected else "got"
            return f"is not a {self.kind}: {expected} {describe(value)}"
        return None

    def _fail(self, name: str, entry: EntryPoint, what: str, fix: str, report: bool = True) -> None:
        """Record why plugin ``name`` cannot be used; report it now, or count it as said by the caller's error."""
        problem = PluginProblem(f"{self.kind} {name!r} from the plugin {entry.distribution!r} {what}", fix)
        self._problems[name] = problem
        line = f"{problem.message}; skipped (fix: {problem.fix})"
        if report:
            report_once(line)
        else:
            _reported.add(line)

    def _discover(self) -> dict[str, EntryPoint]:
        if self._plugins is None:
            self._plugins = {}
            for entry in installed_entry_points().get(self.group, ()):
                if entry.distribution == _OWN_DISTRIBUTION:
                    continue  # our own, already known statically
                if entry.name in self._builtins:
                    report_once(
                        f"{self.kind} {entry.name!r} from the plugin {entry.distribution!r} "
                        "is ignored: a built-in has that name"
                    )
                elif entry.name in self._plugins:
                    report_once(
                        f"{self.kind} {entry.name!r} from the plugin {entry.distribution!r} is ignored: "
                        f"{self._plugins[entry.name].distribution!r} provides it first"
                    )
                else:
                    self._plugins[entry.name] = entry
        return self._plugins


def _lets_through(exc: BaseException) -> bool:
    """Whether an exception met while importing a plugin is not the plugin's failure.

    Every ``Exception`` is, and so is any other a plugin raises itself (``sys.exit("…")`` when a
    dependency is missing); ``KeyboardInterrupt`` and agentstream's own signal and output exceptions
    (``SystemExit`` subclasses) must end the command as they would anywhere else.
    """
    if isinstance(exc, Exception):
        return False
    ours = type(exc).__module__.startswith("agentstream.")
    return ours or isinstance(exc, (KeyboardInterrupt, GeneratorExit))


def describe(value: object) -> str:
    """A wrong object, for a message: ``the class X``, ``the module m``, ``a list``, ``None``."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__qualname__} (not an instance of it)"
    if type(value).__name__ == "module":
        return f"the module {getattr(value, '__name__', '?')}"
    article = "an" if type(value).__name__[:1] in "aeiou" else "a"
    return f"{article} {type(value).__name__}"


_installed: dict[str, list[EntryPoint]] | None = None


def installed_entry_points() -> dict[str, list[EntryPoint]]:
    """Every group's entry points of the distributions on ``sys.path``, read once.

    A distribution found twice (in two ``sys.path`` entries) counts where it is
    found first, as its modules would be imported from there.
    """
    global _installed
    if _installed is None:
        _installed = {}
        seen: set[str] = set()
        for directory in sys.path:
            for distribution, path in _distributions_in(directory or "."):
                if distribution not in seen:
                    seen.add(distribution)
                    for group, entry in _read_entry_points(path, distribution):
                        _installed.setdefault(group, []).append(entry)
    return _installed


def _distributions_in(directory: str) -> list[tuple[str, str]]:
    """``(normalised name, metadata directory)`` of each distribution installed in ``directory``, sorted."""
    try:
        names = os.listdir(directory)
    except OSError:  # not a directory (a zip file), or gone
        return []
    found = []
    for name in sorted(names):
        stem, dot, suffix = name.rpartition(".")
        if dot and suffix in ("dist-info", "egg-info"):
            found.append((_normalise(stem.split("-", 1)[0]), os.path.join(directory, name)))
    return found


def _read_entry_points(metadata_dir: str, distribution: str) -> list[tuple[str, EntryPoint]]:
    """The ``[group]`` / ``name = value`` lines of ``entry_points.txt`` (comments and extras dropped)."""
    try:
        with open(os.path.join(metadata_dir, "entry_points.txt"), encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError:
        return []
    entries: list[tuple[str, EntryPoint]] = []
    group = ""
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif "=" in line and group:
            name, _, value = line.partition("=")
            value = value.partition("[")[0].strip()  # "module:attr [extra]": the extra is pip's business
            entries.append((group, EntryPoint(name.strip(), value, distribution)))
    return entries


def _normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``Agentstream_Toy`` → ``agentstream-toy``)."""
    return "-".join(filter(None, name.replace("_", "-").replace(".", "-").lower().split("-")))


def report_once(message: str) -> None:
    """A plugin problem: one line on stderr, once per process however often it is met."""
    if message not in _reported:
        _reported.add(message)
        sys.stderr.write(f"agentstream: {message}\n")
