"""joelclaw's streamed NDJSON for temporal commands (ADR-0058): progress lines, then a HATEOAS envelope.

Lines: ``start`` (``command``, ``ts``), ``step``, ``progress``, ``log``, ``event``,
each with an ISO 8601 ``ts``, and one terminal line that is the standard envelope:
``result`` ``{ok: true, command, result, next_actions}`` or ``error``
``{ok: false, command, error {message, code}, fix, next_actions}``. A
non-streaming joelclaw command prints only that envelope, without ``type``; the
decoder reads it too.
"""

from __future__ import annotations

from typing import Any

from agentstream import protocol as p
from agentstream.dialects.kit import (
    EventDecoder,
    EventEncoder,
    Fields,
    SimpleDialect,
    identify,
    iso,
    json_or_text,
    text_or_json,
)

_NO_FIX = "no fix was given: see error.message"
_LOG_LEVELS = ("debug", "info", "warn", "error")


def _next_actions(f: Fields) -> list[p.NextAction]:
    """``next_actions`` as canonical structs (``params``, a template's parameters, kept as they are)."""
    actions = []
    for action in f.opt_subs("next_actions"):
        command, description, params = (
            action.text("command"),
            action.text("description"),
            action.opt_mapping("params"),
        )
        actions.append(
            p.NextAction(
                command=command, description=description, params=params if params is not None else p.UNSET
            )
        )
    return actions


def _action_objects(actions: list[p.NextAction]) -> list[dict[str, Any]]:
    objects = []
    for action in actions:
        obj: dict[str, Any] = {"command": action.command, "description": action.description}
        if action.params is not p.UNSET:
            obj["params"] = action.params
        objects.append(obj)
    return objects


class JoelclawDecoder(EventDecoder):
    dialect = "joelclaw"
    command = "joelclaw"
    identifying = identify(
        {
            "": frozenset({"ok"}),
            "result": frozenset({"ok"}),
        }
    )  # "": the bare envelope, which has no type

    def decode_untyped(self, obj: dict[str, Any]) -> None:
        """A non-streaming command's bare envelope."""
        f = self.fields(obj, "joelclaw envelope", "")
        if f.flag("ok"):
            self.on_result(f)
        else:
            self.on_error(f)

    def on_start(self, f: Fields) -> None:
        self.emit(p.Start(command=f.text("command")), f.ts("ts"))

    def on_step(self, f: Fields) -> None:
        name, status = f.text("name"), f.choice("status", ("started", "completed", "failed"), "completed")
        duration_ms, error = f.opt_integer("duration_ms"), f.opt_text("error")
        event = p.Step(
            name=name,
            status=status,  # type: ignore[arg-type]
            duration_ms=duration_ms if duration_ms is not None else p.UNSET,
            error=error if error is not None else p.UNSET,
        )
        self.emit(event, f.ts("ts"))

    def on_progress(self, f: Fields) -> None:
        name, message = f.text("name"), f.opt_text("message")
        percent, current, total = f.opt_number("percent"), f.opt_number("current"), f.opt_number("total")
        event = p.Progress(
            name=name,
            message=message if message is not None else p.UNSET,
            percent=percent if percent is not None else p.UNSET,
            current=current if current is not None else p.UNSET,
            total=total if total is not None else p.UNSET,
        )
        self.emit(event, f.ts("ts"))

    def on_log(self, f: Fields) -> None:
        level, message = f.choice("level", _LOG_LEVELS, "info"), f.text("message")
        self.emit(p.Log(level=level, message=message), f.ts("ts"))  # type: ignore[arg-type]

    def on_event(self, f: Fields) -> None:
        self.emit(p.GenericEvent(name=f.text("name"), data=f.obj.get("data")), f.ts("ts"))

    def on_result(self, f: Fields) -> None:
        if f.opt_flag("ok") is False:
            self.on_error(f)
        else:
            self._envelope(f, None)

    def on_error(self, f: Fields) -> None:
        error, fix = f.sub("error"), f.opt_text("fix")
        code, message = error.text("code"), error.text("message")
        info = p.ErrorInfo(code=code, message=message, fix=fix if fix is not None else p.UNSET)
        self._envelope(f, info)

    def _envelope(self, f: Fields, info: p.ErrorInfo | None) -> None:
        """The terminal envelope: a result (after a fatal error when ``info`` says why the run failed)."""
        command, actions, value = f.opt_text("command"), _next_actions(f), f.obj.get("result")
        self.emit_result(
            ok=info is None,
            exit_code=0 if info is None else 1,
            ts=f.ts("ts"),
            error=info,
            result=text_or_json(value) if value is not None else p.UNSET,
            command=command if command is not None else p.UNSET,
            next_actions=actions,
        )


class JoelclawEncoder(EventEncoder):
    """Writes joelclaw lines; the terminal envelope always carries ``next_actions`` (and ``fix`` on failure)."""

    fold_fatal = True

    def __init__(self) -> None:
        super().__init__()
        self._command = ""

    def on_start(self, event: p.Start) -> list[dict[str, Any]]:
        self._command = event.command
        return [{"type": "start", "command": event.command, "ts": iso(event.ts)}]

    def on_step(self, event: p.Step) -> list[dict[str, Any]]:
        line: dict[str, Any] = {"type": "step", "name": event.name, "status": event.status}
        if event.duration_ms is not p.UNSET:
            line["duration_ms"] = event.duration_ms
        if event.error is not p.UNSET:
            line["error"] = event.error
        line["ts"] = iso(event.ts)
        return [line]

    def on_progress(self, event: p.Progress) -> list[dict[str, Any]]:
        line: dict[str, Any] = {"type": "progress", "name": event.name}
        percent, current, total = event.percent, event.current, event.total
        if percent is p.UNSET and current is not p.UNSET and total is not p.UNSET and total != 0:
            percent = round(current / total * 100, 2)
        if percent is not p.UNSET:
            line["percent"] = percent
        if event.message is not p.UNSET:
            line["message"] = event.message
        line["ts"] = iso(event.ts)
        return [line]

    def on_log(self, event: p.Log) -> list[dict[str, Any]]:
        level = "info" if event.level == "debug" else event.level
        return [{"type": "log", "level": level, "message": event.message, "ts": iso(event.ts)}]

    def on_event(self, event: p.GenericEvent) -> list[dict[str, Any]]:
        return [{"type": "event", "name": event.name, "data": event.data, "ts": iso(event.ts)}]

    def on_error(self, event: p.Error) -> list[dict[str, Any]]:
        """A non-terminal error has no line of its own in joelclaw: it becomes an error-level log."""
        return [
            {
                "type": "log",
                "level": "error",
                "message": f"{event.code}: {event.message}",
                "ts": iso(event.ts),
            }
        ]

    def on_result(self, event: p.Result) -> list[dict[str, Any]]:
        command = event.command if event.command is not p.UNSET else self._command
        actions = _action_objects(event.next_actions)
        if event.ok:
            value = json_or_text(event.result) if event.result is not p.UNSET else None
            return [
                {"type": "result", "ok": True, "command": command, "result": value, "next_actions": actions}
            ]
        failure = self.failure(event) or p.ErrorInfo(code="UNKNOWN", message="the run failed")
        fix = failure.fix if failure.fix is not p.UNSET else _NO_FIX
        return [
            {
                "type": "error",
                "ok": False,
                "command": command,
                "error": {"message": failure.message, "code": failure.code},
                "fix": fix,
                "next_actions": actions,
            }
        ]


class JoelclawDialect(SimpleDialect):
    name = "joelclaw"
    summary = "joelclaw streamed NDJSON with a HATEOAS envelope (ADR-0058)"
    decoder_class = JoelclawDecoder
    encoder_class = JoelclawEncoder

    def sniff(self, obj: dict[str, Any]) -> float:
        if any(key in obj for key in ("v", "seq", "session_id", "timestamp", "protocol")):
            return 0.0
        kind = obj.get("type")
        if (
            isinstance(obj.get("ok"), bool)
            and isinstance(obj.get("command"), str)
            and isinstance(obj.get("next_actions"), list)
        ):
            return 0.85 if kind in ("result", "error", None) else 0.0
        if not isinstance(obj.get("ts"), str):
            return 0.0
        if kind == "start" and isinstance(obj.get("command"), str):
            return 0.9
        if kind == "step" and obj.get("status") in ("started", "completed", "failed"):
            return 0.6
        if kind in ("progress", "log", "event"):
            return 0.5
        return 0.0


DIALECT = JoelclawDialect()
