"""The policy's OpenAI-compatible HTTP endpoint, with continuous batching across concurrent requests.

Request threads (ThreadingHTTPServer, loopback only) validate and tokenize, then queue a Job; one engine thread
decodes every admitted job's rows together (generate.Decoder; a request with n choices is n rows, up to maxBatch
rows at once). Between two decoding steps, finished rows leave (their request is answered as soon as all its rows
are done) and waiting jobs join (their prompts prefilled together), so a short completion never waits for a long
one and a new request never waits for the batch to end. Each row keeps its own max_tokens, stop strings,
temperature, top_p and seed, so a request gets the tokens it would get alone. The engine holds the session lock
while any row is being decoded (a weight update never lands inside a completion); when an update waits for it,
no new job joins and the lock is released as soon as the rows in flight finish. Responses carry the exact token
ids (vLLM-style `prompt_token_ids` / `choices[i].token_ids` when the request says `return_token_ids: true`) and
per-token logprobs of the policy itself. `X-Lightning-Batch-Size` tells the most rows the request was decoded with.

The server is as closed as the daemon: every route lives under a per-server capability path `/p/<key>` (the URL the
worker answers `serve` with; the daemon forwards to it and scrubs it like `/r/<key>`), the Host must be a loopback
name with the server's port (DNS rebinding), a request with an `Origin` (a web page) is refused, a POST must be
`application/json` with a Content-Length under the body cap. And as robust: a connection's headers, body and idle
time are bounded (READ_TIMEOUT_SECONDS, so a body that never arrives holds no thread), a body nested too deep is a 400,
and a request whose client leaves while it is decoded has its rows dropped from the batch before the next step.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import select
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from .batcher import Batcher, ClientGone, Job
from .generate import Generated, Sampling
from .stream import ChatStream

DEFAULT_MAX_TOKENS = 1024  # when a request names no max_tokens
GREEDY_PREFIX = "/greedy"  # the same routes at temperature 0: validation rollouts with an unchanged agent
ADAPTER_PREFIX = "/adapter/"  # /adapter/<policy>: several policies, this one's adapter answers (after /greedy)
BASE_PREFIX = "/base"  # several policies: the base model answers, no adapter
KEY_PREFIX = "/p/"  # /p/<key>: the capability path every request needs
MAX_BODY_BYTES = int(os.environ.get("LIGHTNING_POLICY_MAX_BODY_BYTES") or 32 * 1024 * 1024)
# A connection's reads and writes: headers, a whole body, an idle keep-alive and a client not reading its answer each
# get this long, so a declared body that never arrives (or a client gone silent) cannot hold a thread forever.
READ_TIMEOUT_SECONDS = float(os.environ.get("LIGHTNING_POLICY_READ_TIMEOUT_SECONDS") or 30)
MAX_JSON_DEPTH = 128  # a body nested deeper is a 400: json and the chat templates would recurse that deep
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class RequestError(ValueError):
    """A bad request: HTTP 400 with an OpenAI-style error body naming the parameter."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"'{name}' must be a number in [{low}, {high}]", name)
    return float(value)


def _integer(body: dict, name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"'{name}' must be an integer in [{low}, {high}]", name)
    return value


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise RequestError("'stop' must be a string or a list of up to 4 strings", "stop")
    return stops


class Completions:
    """Turns request bodies into jobs and generated rows into OpenAI response objects."""

    def __init__(self, session, batcher: Batcher):
        self.session = session
        self.batcher = batcher

    @property
    def policy(self):
        return self.session.serving_policy

    def _sampling(self, body: dict, prompt: list[int], adapter: Optional[str] = None) -> list[Sampling]:
        context = self.policy.context
        room = DEFAULT_MAX_TOKENS if context is None else min(DEFAULT_MAX_TOKENS, context - len(prompt))
        if room <= 0:
            raise RequestError(f"the prompt is {len(prompt)} tokens; this model's context is {context}", "messages")
        max_tokens = _integer(body, "max_completion_tokens", None, 1, 1 << 20)
        max_tokens = _integer(body, "max_tokens", max_tokens, 1, 1 << 20) or room  # generate() stops at the context
        n = _integer(body, "n", 1, 1, self.batcher.max_batch)
        seed = _integer(body, "seed", None, -(1 << 63), (1 << 63) - 1)
        top = _integer(body, "top_logprobs", 0, 0, 20) if body.get("logprobs") else 0
        return [
            Sampling(
                max_tokens=max_tokens,
                temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
                top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
                stop=_stops(body),
                seed=None if seed is None else seed + i,
                top_logprobs=top,
                adapter=adapter,
            )
            for i in range(n)
        ]

    def _run(self, prompt: list[int], body: dict, adapter: Optional[str]) -> Job:
        job = self.batcher.run(Job(prompt, self._sampling(body, prompt, adapter)))
        if job.error is not None:
            raise job.error
        return job

    def text_of(self, out: Generated) -> str:
        """The completion's text: up to a matched stop string, without a final stop token."""
        if out.stop_text is not None:
            return out.stop_text
        ids = out.ids[:-1] if out.ids and out.ids[-1] in self.policy.stop_ids else out.ids
        return self.policy.decode(ids)

    def logprob_entries(self, out: Generated, start: int = 0, end: Optional[int] = None) -> list[dict]:
        """OpenAI chat logprobs entries of tokens start..end of a completion."""
        entries = []
        end = len(out.ids) if end is None else end
        for k in range(start, end):
            token, raw = self.policy.token_info(out.ids[k])
            entry = {"token": token, "logprob": out.logprobs[k], "bytes": raw, "top_logprobs": []}
            for top_id, top_logprob in out.top[k] if out.top else []:
                top_token, top_raw = self.policy.token_info(top_id)
                entry["top_logprobs"].append({"token": top_token, "logprob": top_logprob, "bytes": top_raw})
            entries.append(entry)
        return entries

    @staticmethod
    def usage(prompt: list[int], outputs: list[Generated]) -> dict:
        completion = sum(len(o.ids) for o in outputs)
        return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}

    def chat_job(self, body: dict, stream: bool = False, adapter: Optional[str] = None) -> tuple[Job, Optional[list]]:
        """The request's job, queued (decoded from the next step on), and the tools its output is parsed with."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("'messages' must be a non-empty list of message objects", "messages")
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise RequestError("'tools' must be a list of tool objects", "tools")
        prompt = self.policy.render_prompt(messages, tools)
        job = self.batcher.submit(Job(prompt, self._sampling(body, prompt, adapter), stream=stream))
        return job, tools if body.get("tool_choice") != "none" else None

    def chat(self, body: dict, adapter: Optional[str] = None) -> tuple[dict, int]:
        job, parse_tools = self.chat_job(body, adapter=adapter)
        self.batcher.wait(job)
        if job.error is not None:
            raise job.error
        choices = []
        for index, out in enumerate(job.outputs):
            content, calls = self.policy.parse_output(self.text_of(out), parse_tools)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice = {
                "index": index,
                "message": message,
                "finish_reason": "tool_calls" if calls else out.finish_reason,
                "logprobs": {"content": self.logprob_entries(out)} if body.get("logprobs") else None,
            }
            if body.get("return_token_ids"):
                choice["token_ids"] = out.ids
            choices.append(choice)
        return self.envelope("chatcmpl", "chat.completion", body, job, choices)

    def text(self, body: dict, adapter: Optional[str] = None) -> tuple[dict, int]:
        prompt_text = body.get("prompt")
        if not isinstance(prompt_text, str):
            raise RequestError("'prompt' must be a string", "prompt")
        prompt = self.policy.encode_prompt(prompt_text)
        job = self._run(prompt, body, adapter)
        choices = []
        for index, out in enumerate(job.outputs):
            choice = {"index": index, "text": self.text_of(out), "finish_reason": out.finish_reason, "logprobs": None}
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "tokens": [self.policy.token_info(i)[0] for i in out.ids],
                    "token_logprobs": out.logprobs,
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = out.ids
            choices.append(choice)
        return self.envelope("cmpl", "text_completion", body, job, choices)

    def envelope(self, prefix: str, kind: str, body: dict, job: Job, choices: list) -> tuple[dict, int]:
        """The response around the choices: a unique id, usage, and the prompt's token ids when asked for."""
        response = {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model") or self.policy.name,
            "choices": choices,
        }
        if job.outputs is not None:
            response["usage"] = self.usage(job.prompt, job.outputs)
        if body.get("return_token_ids"):
            response["prompt_token_ids"] = job.prompt
        return response, job.batch_rows


def _depth(value: Any) -> int:
    """How deep a parsed JSON value nests, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_DEPTH:
                stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _parse_json(raw: bytes) -> dict:
    """The body as a JSON object; too deep (json itself would recurse past the interpreter's limit) is a 400."""
    try:
        body = json.loads(raw or b"null")
    except json.JSONDecodeError as error:
        raise RequestError(f"the body is not JSON: {error}") from None
    except RecursionError:
        raise RequestError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    if _depth(body) > MAX_JSON_DEPTH:
        raise RequestError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response is written as head then body: with Nagle's algorithm the body waits for the ACK of the head, which
    # the client delays (~40 ms on Linux) — per request, longer than decoding a short completion.
    disable_nagle_algorithm = True
    completions: Completions  # set on the subclass made per server
    key: str  # the capability path's key, likewise

    def setup(self) -> None:
        self.timeout = READ_TIMEOUT_SECONDS  # socketserver sets it on the connection: every read and write
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # request lines stay out of the worker's stderr
        pass

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (readable with nothing to read); a pipelined next request is
        data, not a close."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _read_body(self, length: int) -> bytes:
        """The declared body, all of it within READ_TIMEOUT_SECONDS (a byte now and then does not extend it)."""
        deadline = time.monotonic() + READ_TIMEOUT_SECONDS
        chunks, remaining = [], length
        while remaining > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.connection.settimeout(left)
            chunk = self.rfile.read1(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError("the client closed the connection before its body ended")
            chunks.append(chunk)
            remaining -= len(chunk)
        self.connection.settimeout(READ_TIMEOUT_SECONDS)
        return b"".join(chunks)

    def _send(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, param: Optional[str] = None) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": None}})

    def _refuse(self, status: int, message: str) -> None:
        """Answers an error without reading the body: the connection then closes."""
        self.close_connection = True
        self._send(
            status,
            {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}},
            {"Connection": "close"},
        )

    def _admitted(self) -> Optional[str]:
        """The request's path after `/p/<key>` when it may be served; else answers the refusal and gives None."""
        port = self.server.server_address[1]
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in {f"{name}:{port}" for name in LOOPBACK_HOSTS}:
            self._refuse(403, f"the Host header must be 127.0.0.1:{port}, localhost:{port} or [::1]:{port}")
            return None
        if self.headers.get("Origin") is not None:
            self._refuse(403, "requests from web pages (with an Origin header) are refused")
            return None
        path = self.path.split("?", 1)[0]
        key = path[len(KEY_PREFIX) :].split("/", 1)[0] if path.startswith(KEY_PREFIX) else ""
        if not hmac.compare_digest(key.encode(), self.key.encode()):
            self._refuse(401, "unknown policy server key: use the URL the trainer worker answered `serve` with")
            return None
        return path[len(KEY_PREFIX) + len(key) :] or "/"

    def _route_path(self, path: str) -> tuple[str, bool, Optional[str]]:
        """The path without its `/greedy` prefix (validation: temperature 0 whatever is asked) and, with several
        policies, its `/adapter/<policy>` or `/base` prefix; whether it was greedy, and the adapter that answers
        (None: the base model with several policies, the policy itself with one). An adapter this server does not
        hold is a RequestError (404)."""
        path = path.rstrip("/")
        greedy = path.startswith(GREEDY_PREFIX + "/")
        path = path[len(GREEDY_PREFIX) :] if greedy else path
        adapters = self.completions.policy.adapters
        adapter = None
        if path.startswith(ADAPTER_PREFIX):
            adapter, _, rest = path[len(ADAPTER_PREFIX) :].partition("/")
            path = "/" + rest
            if adapter not in (adapters or []):
                held = f"its adapters are {', '.join(adapters)}" if adapters else "it serves one policy (no adapters)"
                raise RequestError(f"this policy server has no adapter {adapter!r}: {held}")
        elif path == BASE_PREFIX or path.startswith(BASE_PREFIX + "/"):
            path = path[len(BASE_PREFIX) :]
            if not adapters:
                raise RequestError("this policy server serves one policy: there is no base route (/base) to choose")
        return path, greedy, adapter

    def do_GET(self) -> None:
        path = self._admitted()
        if path is None:
            return
        try:
            route = self._route_path(path)[0]
        except RequestError as error:
            return self._error(404, str(error))
        if route == "/v1/models":
            name = self.completions.policy.name
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "lightning"}]})
        else:
            self._error(404, f"no route GET {path}")

    def do_POST(self) -> None:
        path = self._admitted()
        if path is None:
            return
        media = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return self._refuse(415, "the body must be application/json")
        if self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length") is None:
            return self._refuse(411, "send the body with a Content-Length (no chunked encoding)")
        try:
            length = int(self.headers["Content-Length"])
        except ValueError:
            return self._refuse(400, "the Content-Length is not a number")
        if length < 0 or length > MAX_BODY_BYTES:
            return self._refuse(413, f"the body ({length} bytes) is over the {MAX_BODY_BYTES}-byte limit")
        with self.completions.batcher.request(gone=self._client_gone):
            self._post(path, length)

    def _post(self, request_path: str, length: int) -> None:
        routes = {"/v1/chat/completions": self.completions.chat, "/v1/completions": self.completions.text}
        try:
            try:
                raw = self._read_body(length)
            except TimeoutError:
                return self._refuse(408, f"the body did not arrive within {READ_TIMEOUT_SECONDS:g} s")
            except OSError:  # the client left while its body was being read
                self.close_connection = True
                return
            try:
                path, greedy, adapter = self._route_path(request_path)
            except RequestError as error:
                return self._error(404, str(error))
            route = routes.get(path)
            if route is None:
                return self._error(404, f"no route POST {request_path}")
            body = _parse_json(raw)
            if greedy:
                body = {**body, "temperature": 0.0}
            if body.get("stream") and route == self.completions.chat:
                return self._stream(body, adapter)
            response, rows = route(body, adapter)
        except ClientGone:
            self.close_connection = True  # nobody to answer: its rows were dropped
            return
        except RequestError as error:
            return self._error(400, str(error), error.param)
        except RecursionError:
            return self._error(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
        except Exception as error:  # a model failure answers this request; the server keeps running
            return self._error(500, f"{type(error).__name__}: {error}")
        self._send(200, response, {"X-Lightning-Batch-Size": str(rows)})

    def _stream(self, body: dict, adapter: Optional[str]) -> None:
        """A streamed chat completion: its tokens as they are decoded (stream.ChatStream). A failure before the first
        event is an HTTP error like any other; after it, an error event ends the stream."""
        job, parse_tools = self.completions.chat_job(body, stream=True, adapter=adapter)
        try:
            ChatStream(self.completions, body, job, parse_tools, self).run()
        except OSError:  # the client left mid-stream: its rows leave the batch before the next step
            self.completions.batcher.cancel(job)
            self.close_connection = True

    def begin_stream(self, batch_rows: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("X-Lightning-Batch-Size", str(batch_rows))
        self.end_headers()
        self.close_connection = True

    def send_events(self, events: list) -> None:
        """SSE events (JSON objects, or "[DONE]"), written and flushed together."""
        data = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
        self.wfile.write(data.encode())
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # an agent's calls arrive together: socketserver's backlog of 5 would refuse some


class PolicyServer:
    def __init__(self, session, host: str, port: int, max_batch: int):
        self.batcher = Batcher(session, max_batch)
        self.key = secrets.token_urlsafe(24)  # 32 characters, as a rollout key
        handler = type("BoundHandler", (Handler,), {"completions": Completions(session, self.batcher), "key": self.key})
        self.httpd = Server((host, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)
        self.thread.start()
        bound_host, bound_port = self.httpd.server_address[:2]
        self.url = (
            f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}{KEY_PREFIX}{self.key}"
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.batcher.close()
