"""In-process checks of the ACP pieces no process boundary is needed for: the mapping and the JSON-RPC framing."""

from __future__ import annotations

import io
import json
import threading

from agentstream import protocol as p
from agentstream.acp.mapping import UpdateMapper, stop_reason, tool_kind
from agentstream.acp.server import RpcError, RpcPeer


def result(**fields: object) -> p.Result:
    base: dict[str, object] = {"ok": False, "subtype": "error", "exit_code": 1}
    return p.Result(**{**base, **fields})  # type: ignore[arg-type]


def test_stop_reasons_follow_the_canonical_outcome() -> None:
    assert stop_reason(result(ok=True, subtype="success", exit_code=0)) == "end_turn"
    assert stop_reason(result(subtype="interrupted", exit_code=130)) == "cancelled"
    assert stop_reason(result(subtype="max_turns", exit_code=3)) == "max_turn_requests"
    assert stop_reason(result(subtype="refusal")) == "refusal"
    limit = p.ErrorInfo(code="CONTEXT_LIMIT", message="too long")
    assert stop_reason(result(error=limit)) == "max_tokens"
    assert stop_reason(result(error=p.ErrorInfo(code="RATE_LIMITED", message="slow down"))) is None


def test_deltas_are_not_repeated_by_the_complete_message() -> None:
    mapper = UpdateMapper("/w")
    out = mapper.updates(p.MessageDelta(message_id="m1", content="Hel"))
    out += mapper.updates(p.MessageDelta(message_id="m1", content="lo"))
    out += mapper.updates(p.Message(message_id="m1", role="assistant", content="Hello"))
    out += mapper.updates(p.Message(message_id="m2", role="assistant", content="Whole"))
    assert [u["content"]["text"] for u in out] == ["Hel", "lo", "Whole"]


def test_an_id_streamed_in_an_earlier_turn_still_shows_this_turns_message() -> None:
    """A CLI run per prompt may reuse an id: the new turn's whole message is shown, under an id of its own."""
    mapper = UpdateMapper("/w")
    mapper.begin_turn()
    (first,) = mapper.updates(p.MessageDelta(message_id="item_1", content="one"))
    mapper.updates(p.Message(message_id="item_1", role="assistant", content="one"))
    mapper.begin_turn()
    (second,) = mapper.updates(p.Message(message_id="item_1", role="assistant", content="two"))
    assert second["content"]["text"] == "two"
    assert second["messageId"] != first["messageId"]


def test_the_clis_file_and_search_tools_have_their_kinds() -> None:
    assert [tool_kind(name) for name in ("list_directory", "NotebookEdit", "google_web_search")] == [
        "read",
        "edit",
        "search",
    ]


def test_a_todo_tool_call_is_also_a_plan() -> None:
    todos = [{"content": "look", "status": "completed"}, {"content": "fix", "status": "in_progress"}]
    out = UpdateMapper("/w").updates(p.ToolCall(call_id="t1", name="TodoWrite", arguments={"todos": todos}))
    assert [u["sessionUpdate"] for u in out] == ["tool_call", "plan"]
    assert out[0]["kind"] == "think"
    assert out[1]["entries"] == [
        {"content": "look", "priority": "medium", "status": "completed"},
        {"content": "fix", "priority": "medium", "status": "in_progress"},
    ]


def test_an_unknown_status_loses_the_field_not_the_result() -> None:
    mapper = UpdateMapper("/w")
    mapper.updates(
        p.ToolCall(
            call_id="c", name="Edit", arguments={"file_path": "a.py", "old_string": "1", "new_string": "2"}
        )
    )
    (done,) = mapper.updates(p.ToolResult(call_id="c", name="Edit", status="denied", error="no"))
    assert done["status"] == "failed"
    assert done["content"][0] == {"type": "diff", "path": "/w/a.py", "oldText": "1", "newText": "2"}


def serve(lines: list[bytes], **handlers: object) -> list[dict[str, object]]:
    """Run a peer over these input lines; what it wrote back."""
    out = io.BytesIO()
    peer = RpcPeer(io.BytesIO(b"".join(lines)), out, **handlers)  # type: ignore[arg-type]
    peer.serve()
    peer.join_workers(5.0)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_bad_lines_and_unknown_methods_get_jsonrpc_errors() -> None:
    def fail(params: dict[str, object]) -> object:
        raise RpcError(-32602, "bad params", {"param": "x"})

    written = serve(
        [
            b"not json\n",
            b"[1]\n",
            b'{"jsonrpc":"2.0","id":7,"method":"nope"}\n',
            b'{"jsonrpc":"2.0","id":8,"method":"f"}\n',
        ],
        requests={"f": fail},
    )
    by_id = {(m.get("id"), m["error"]["code"]) for m in written}  # type: ignore[index]
    assert by_id == {(None, -32700), (None, -32600), (7, -32601), (8, -32602)}
    assert next(m for m in written if m.get("id") == 8)["error"]["data"] == {"param": "x"}  # type: ignore[index]


def test_a_message_shaped_as_a_response_is_never_answered() -> None:
    """Answering the peer's complaints (an error with a null id, say) lets two peers trade them for ever."""
    heard: list[str] = []
    written = serve(
        [
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"not JSON"}}\n',
            b'{"jsonrpc":"2.0","id":14}\n',
            b'{"jsonrpc":"2.0","id":"s","result":{}}\n',
            b'{"jsonrpc":"2.0","id":99,"error":{"code":-32600,"message":"unknown"}}\n',
            b'{"jsonrpc":"2.0","id":1,"method":"f"}\n',
        ],
        requests={"f": lambda params: {"ok": True}},
        on_bad_line=lambda line, reason: heard.append(reason),
    )
    assert written == [{"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}]
    assert heard.count("a response to no request of ours") == 3  # the unknown int id is simply dropped


def test_a_bad_byte_inside_a_string_keeps_the_message_and_the_connection() -> None:
    """Invalid UTF-8 in a string once ended the reading silently: no answer to it, nor to anything after it."""
    seen: list[object] = []

    def echo(params: dict[str, object]) -> object:
        seen.append(params["text"])
        return {"ok": True}

    written = serve(
        [b'{"jsonrpc":"2.0","id":1,"method":"f","params":{"text":"bad \xff byte"}}\n',
         b'{"jsonrpc":"2.0","id":2,"method":"f","params":{"text":"next"}}\n'],
        requests={"f": echo},
    )  # fmt: skip
    assert sorted(m["id"] for m in written) == [1, 2]  # type: ignore[type-var]
    assert sorted(seen) == ["bad \ufffd byte", "next"]  # type: ignore[type-var]


def test_a_request_fails_when_the_other_side_goes_away() -> None:
    from agentstream.acp.server import PeerClosed

    reader = io.BytesIO(b"")
    peer = RpcPeer(reader, io.BytesIO())
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            peer.request("session/request_permission", {})
        except PeerClosed as exc:
            errors.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    peer.serve()  # the input is already at its end
    asker.join(5.0)
    assert len(errors) == 1  # raised, whether it was asked before or after the input ended


def test_ids_and_params_are_checked_as_jsonrpc_asks() -> None:
    """An id that is an object, an array or a boolean is an invalid request (answered with id null);
    params that are not an object are invalid params, or, on a notification, a reported line."""
    seen: list[object] = []
    bad_lines: list[str] = []
    written = serve(
        [
            b'{"jsonrpc":"2.0","id":{"n":1},"method":"f","params":{}}\n',
            b'{"jsonrpc":"2.0","id":[1],"method":"f","params":{}}\n',
            b'{"jsonrpc":"2.0","id":true,"method":"f","params":{}}\n',
            b'{"jsonrpc":"2.0","id":4,"method":"f","params":[1]}\n',
            b'{"jsonrpc":"2.0","id":5,"method":"f","params":"text"}\n',
            b'{"jsonrpc":"2.0","method":"n","params":[1]}\n',
            b'{"jsonrpc":"2.0","id":"s","method":"f"}\n',
            b'{"jsonrpc":"2.0","id":1.5,"method":"f","params":null}\n',
            b'{"jsonrpc":"2.0","id":null,"method":"f","params":{"k":1}}\n',
        ],
        requests={"f": lambda params: seen.append(params) or {"ok": True}},
        notifications={"n": seen.append},
        on_bad_line=lambda line, reason: bad_lines.append(reason),
    )
    refused = sorted(repr((m["id"], m["error"]["code"])) for m in written if "error" in m)  # type: ignore[index]
    assert refused == ["(4, -32602)", "(5, -32602)", "(None, -32600)", "(None, -32600)", "(None, -32600)"]
    assert sorted(str(m["id"]) for m in written if "result" in m) == ["1.5", "None", "s"]
    assert sorted(map(str, seen)) == ["{'k': 1}", "{}", "{}"]  # a notification with bad params is not handled
    assert len(bad_lines) == 4 and "the params of n must be an object, not an array" in bad_lines
