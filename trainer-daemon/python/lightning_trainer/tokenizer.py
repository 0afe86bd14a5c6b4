"""The tiny model's byte-level tokenizer and its compact chat template (see PROTOCOL.md, "Tiny model").

Ids 0–255 are bytes, then BOS, EOS and PAD. The template renders only what short tasks need, so prompts stay a few
dozen bytes: user → "Q:{content}\\n", tool result → "R:{content}\\n", assistant → "{content}\\n" or, for a tool call,
"{name}({v1},{v2},…)\\n" with the argument values in the order of the tool's JSON-schema properties. An assistant
turn ends at "\\n" (or EOS), so the prompt of the next call extends the previous prompt + response token for token.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Optional

BOS, EOS, PAD = 256, 257, 258
VOCAB_SIZE = 259
NEWLINE = 10


class ByteTokenizer:
    bos_id, eos_id, pad_id = BOS, EOS, PAD
    vocab_size = VOCAB_SIZE
    stop_ids = frozenset({EOS, NEWLINE})

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> list[int]:
        return [token_id] if token_id < 256 else []

    def token_text(self, token_id: int) -> str:
        return {BOS: "<bos>", EOS: "<eos>", PAD: "<pad>"}.get(token_id) or bytes([token_id]).decode("latin-1")


def message_text(content: Any) -> str:
    """OpenAI message content: a string, null, or a list of parts (text parts are joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _tool_properties(tools: Optional[list], name: str) -> Optional[dict]:
    for tool in tools or []:
        function = tool.get("function", tool)
        if function.get("name") == name:
            return (function.get("parameters") or {}).get("properties") or {}
    return None


def _render_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def render_tool_call(call: dict, tools: Optional[list]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = json.loads(arguments or "{}")
    order = _tool_properties(tools, function["name"]) or arguments
    values = [_render_value(arguments[key]) for key in order if key in arguments]
    return f"{function['name']}({','.join(values)})"


def render_chat(messages: list[dict], tools: Optional[list] = None) -> str:
    """The prompt text for a conversation; the assistant's reply follows it directly."""
    parts = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            parts.append(f"Q:{message_text(message.get('content'))}\n")
        elif role == "tool":
            parts.append(f"R:{message_text(message.get('content'))}\n")
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if calls:
                parts.extend(render_tool_call(call, tools) + "\n" for call in calls)
            else:
                parts.append(message_text(message.get("content")) + "\n")
        # system/developer messages and tool schemas are deliberately not rendered (see the module doc).
    return "".join(parts)


def render_completion(completion: dict, tools: Optional[list] = None) -> str:
    """An assistant completion ({content?, tool_calls?}) as the model should produce it, terminator included."""
    return render_chat([{"role": "assistant", **completion}], tools)


_CALL = re.compile(r"^([A-Za-z_][\w.-]*)\((.*)\)$", re.S)


def _typed(value: str, schema: dict) -> Any:
    kind = schema.get("type")
    if kind == "integer":
        return int(value)
    if kind == "number":
        number = float(value)
        return int(number) if number.is_integer() and re.fullmatch(r"-?\d+", value) else number
    if kind == "boolean":
        return {"true": True, "false": False}[value]
    return value


def parse_tool_call(text: str, tools: Optional[list]) -> Optional[dict]:
    """`name(v1,v2)` with `name` one of the tools and one value per schema property → an OpenAI tool call."""
    match = _CALL.match(text.strip())
    if not match or not tools:
        return None
    properties = _tool_properties(tools, match.group(1))
    if properties is None:
        return None
    values = match.group(2).split(",") if match.group(2) else []
    if len(values) != len(properties):
        return None
    try:
        arguments = {key: _typed(value, schema or {}) for (key, schema), value in zip(properties.items(), values)}
    except (ValueError, KeyError):
        return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": match.group(1), "arguments": json.dumps(arguments)},
    }
