"""`python3 -m lightning_trainer.worker`: the trainer worker's stdin/stdout JSON-lines loop (PROTOCOL.md).

Prints a ready line, then answers requests one at a time. A failing method answers an error (kind bad_params,
state, oom or runtime, with the Python traceback) and the worker keeps going; `shutdown` or the end of stdin ends
it. Python's own stdout (fd 1 included) is redirected to stderr so a stray print can never corrupt the protocol stream.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from . import PROTOCOL_VERSION
from .environment import describe
from .params import (
    Empty,
    EvaluateParams,
    ExportParams,
    LoadParams,
    SaveParams,
    ServeParams,
    SftParams,
    TokenizeParams,
    TrainParams,
)
from .schema import BadParams, parse

METHODS: dict[str, type] = {
    "load": LoadParams,
    "serve": ServeParams,
    "sft": SftParams,
    "evaluate": EvaluateParams,
    "train": TrainParams,
    "save": SaveParams,
    "export": ExportParams,
    "tokenize": TokenizeParams,
    "shutdown": Empty,
}


class Output:
    """Serializes lines from the request loop and from server threads (events)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.lock = threading.Lock()

    def write(self, message: dict) -> None:
        line = json.dumps(_finite(message), allow_nan=False, default=str)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def _out_of_memory_types() -> tuple[type, ...]:
    """The exception types an allocator raises when memory runs out: the host's, CUDA's (torch >= 1.13) and, on
    torch >= 2.5, the one every accelerator's allocator raises. By type, never by message text."""
    import torch

    found = [MemoryError]
    for owner in (torch, torch.cuda):
        kind = getattr(owner, "OutOfMemoryError", None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


def error_kind(error: BaseException) -> str:
    from .session import StateError

    if isinstance(error, StateError):
        return "state"
    if isinstance(error, _out_of_memory_types()):
        return "oom"
    return "runtime"


def _finite(value: Any) -> Any:
    """NaN/inf (e.g. a diverged loss) as null: JSON has no NaN."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def handle(session, message: Any) -> dict:
    if not isinstance(message, dict) or message.get("type") != "request" or not isinstance(message.get("id"), int):
        raise BadParams('each line must be {"type":"request","id":int,"method":str,"params":{}}')
    method = message.get("method")
    if method not in METHODS:
        raise BadParams(f"unknown method {method!r} (known: {', '.join(METHODS)})")
    params = parse(METHODS[method], message.get("params") if message.get("params") is not None else {})
    if method == "shutdown":
        return {}
    return getattr(session, method)(params)


def serve_stdio(stdin: TextIO, out: Output, make_session: Callable) -> None:
    session = make_session(out.write)
    for line in stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            message = json.loads(line)
            request_id = message.get("id") if isinstance(message, dict) else None
            result = handle(session, message)
            out.write({"type": "response", "id": request_id, "result": result})
            if message.get("method") == "shutdown":
                break
        except json.JSONDecodeError as error:
            out.write(
                {
                    "type": "response",
                    "id": None,
                    "error": {"kind": "bad_params", "message": f"the line is not JSON: {error}"},
                }
            )
        except BadParams as error:
            out.write({"type": "response", "id": request_id, "error": {"kind": "bad_params", "message": str(error)}})
        except Exception as error:  # every failure is answered with its traceback; the worker keeps serving
            trace = traceback.format_exc()
            sys.stderr.write(trace)
            out.write(
                {
                    "type": "response",
                    "id": request_id,
                    "error": {
                        "kind": error_kind(error),
                        "message": str(error) or type(error).__name__,
                        "traceback": trace,
                    },
                }
            )
    session.close()


def main() -> None:
    protocol_out = Output(os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # native code writing to fd 1 lands in the log too
    sys.stdout = sys.stderr
    from .session import Session  # imports torch: after the redirect, in case anything prints

    protocol_out.write({"type": "ready", "protocol": PROTOCOL_VERSION, **describe()})
    serve_stdio(sys.stdin, protocol_out, Session)


if __name__ == "__main__":
    main()
