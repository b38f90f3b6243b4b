"""The envelope of point-in-time commands and the ``next_actions`` templates.

A point-in-time command (``runs``, ``sessions``, ``send``, ``submit``) prints, when
piped or given ``--json``, exactly one JSON object (on a terminal it prints a short
table or line for a person instead): ``{ok, command, result, next_actions}`` on success, ``{ok: false,
command, result: null, error: {code, message}, fix, next_actions}`` on failure.
Temporal commands (``follow``, ``watch``, ``logs --follow``) print events
instead and carry the same fields on their final ``result`` line.

A next action is a template: ``command`` uses ``<name>`` for a required value and
``[--flag <name>]`` for an optional one; ``params`` describes each name with a
``value`` already known from context, or a ``default``. :func:`fill` turns a
template into an argv a program can run.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agentstream.errors import AgentstreamError, ExitCode, error_text
from agentstream.protocol import JSON_ENCODER, NextAction

__all__ = [
    "Envelope",
    "EnvelopeError",
    "action",
    "envelope_json",
    "error_envelope",
    "fill",
    "ok_envelope",
    "print_envelope",
    "print_error",
    "wants_json",
]


class EnvelopeError(msgspec.Struct, kw_only=True):
    code: str
    message: str


class Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    ok: bool
    command: str
    result: Any = None
    error: EnvelopeError | None = None
    fix: str | None = None
    next_actions: list[NextAction] = []


def action(command: str, description: str, **params: Mapping[str, Any]) -> NextAction:
    """A next action; each keyword is one ``<name>`` of the template (``value``, ``default``, ``description``…)."""
    return NextAction(
        command=command, description=description, params=dict(params) if params else msgspec.UNSET
    )


def ok_envelope(command: str, result: Any, next_actions: list[NextAction]) -> Envelope:
    return Envelope(ok=True, command=command, result=result, next_actions=next_actions)


def error_envelope(
    command: str, exc: AgentstreamError, next_actions: list[NextAction] | None = None
) -> Envelope:
    return Envelope(
        ok=False,
        command=command,
        error=EnvelopeError(code=str(exc.code), message=exc.message),
        fix=exc.fix or "see 'agentstream --help'",
        next_actions=next_actions or [],
    )


def envelope_json(envelope: Envelope) -> bytes:
    """The envelope as one JSON object (``result`` always present), without a newline."""
    fields = msgspec.to_builtins(envelope)
    data = {"ok": fields["ok"], "command": fields["command"], "result": fields.get("result"), **fields}
    return JSON_ENCODER.encode(data)


def wants_json(json_flag: bool = False) -> bool:
    """Programs get JSON: when asked with ``--json``, or when stdout is not a terminal."""
    return json_flag or not sys.stdout.isatty()


def print_envelope(
    envelope: Envelope,
    exit_code: int = ExitCode.OK,
    *,
    human: Callable[[Any], str] | None = None,
    json_flag: bool = False,
) -> int:
    """Write the envelope as one JSON line on stdout; return ``exit_code``.

    With ``human`` and a terminal on stdout (and no ``--json``), ``human(result)``
    is written instead: the same facts, for a person.
    """
    if human is not None and not wants_json(json_flag):
        sys.stdout.write(human(envelope.result))
        sys.stdout.flush()
        return int(exit_code)
    sys.stdout.buffer.write(envelope_json(envelope) + b"\n")
    sys.stdout.buffer.flush()
    return int(exit_code)


def print_error(
    command: str,
    exc: AgentstreamError,
    next_actions: list[NextAction] | None = None,
    *,
    json_flag: bool = False,
) -> int:
    """Report ``exc``: one human line on stderr always, the failure envelope on stdout for programs.

    Returns the exit code (2 for bad usage, else 1).
    """
    sys.stderr.write(error_text(command, exc.code, exc.message, exc.fix, one_line=True))
    if not wants_json(json_flag):
        return int(exc.exit_code)
    return print_envelope(error_envelope(command, exc, next_actions), exc.exit_code)


_OPTIONAL = re.compile(r"\[(--[\w-]+)(?: <([\w-]+)>)?\]")
_REQUIRED = re.compile(r"<([\w-]+)>")


def fill(template: NextAction, **values: Any) -> list[str]:
    """The argv for a template: ``values`` first, then each param's ``value``, then its ``default``.

    An optional ``[--flag <name>]`` with no value is dropped; a required ``<name>``
    with no value raises ``KeyError``.
    """
    import shlex

    known = _known_values(template, values)

    def optional(match: re.Match[str]) -> str:
        flag, name = match.group(1), match.group(2)
        if name is None:
            return flag if known.get(flag.lstrip("-")) else ""
        return f"{flag} {shlex.quote(str(known[name]))}" if known.get(name) is not None else ""

    text = _OPTIONAL.sub(optional, template.command)
    text = _REQUIRED.sub(lambda m: shlex.quote(str(known[m.group(1)])), text)
    return shlex.split(text)


def _known_values(template: NextAction, values: Mapping[str, Any]) -> dict[str, Any]:
    known: dict[str, Any] = {}
    params = template.params if isinstance(template.params, dict) else {}
    for name, spec in params.items():
        if isinstance(spec, Mapping):
            if "value" in spec:
                known[name] = spec["value"]
            elif "default" in spec:
                known[name] = spec["default"]
    known.update(values)
    return known
