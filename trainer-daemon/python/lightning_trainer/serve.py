"""The policy's OpenAI-compatible HTTP endpoint, with dynamic batching across concurrent requests.

Request threads (ThreadingHTTPServer, loopback only) validate and tokenize, then queue a Job; one batcher thread
takes every waiting job (up to maxBatch rows; a request with n choices is n rows), generates them together under
the session lock (so weight updates never interleave with a batch) and hands each request its rows back.
Responses carry the exact token ids (vLLM-style `prompt_token_ids` / `choices[i].token_ids` when the request says
`return_token_ids: true`) and per-token logprobs of the policy itself. `X-Lightning-Batch-Size` tells how many rows
the request's batch held.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Optional

from .generate import Generated, Sampling, generate

GATHER_SECONDS = 0.005
DEFAULT_MAX_TOKENS = 1024  # when a request names no max_tokens
GREEDY_PREFIX = "/greedy"  # the same routes at temperature 0: validation rollouts with an unchanged agent


class RequestError(ValueError):
    """A bad request: HTTP 400 with an OpenAI-style error body naming the parameter."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


@dataclass
class Job:
    prompt: list[int]
    settings: list[Sampling]
    done: threading.Event = field(default_factory=threading.Event)
    outputs: Optional[list[Generated]] = None
    error: Optional[BaseException] = None
    batch_rows: int = 0


class Batcher:
    def __init__(self, session, max_batch: int):
        self.session = session
        self.max_batch = max_batch
        self.queue: list[Job] = []
        self.ready = threading.Condition()
        self.closed = False
        self.in_flight = 0  # HTTP requests being handled (read, queued or generating)
        self.last_rows = 0
        self.thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
        self.thread.start()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Brackets an HTTP request, so the batcher knows more work is on its way."""
        with self.ready:
            self.in_flight += 1
        try:
            yield
        finally:
            with self.ready:
                self.in_flight -= 1

    def run(self, job: Job) -> Job:
        with self.ready:
            self.queue.append(job)
            self.ready.notify()
        job.done.wait()
        return job

    def _take(self) -> list[Job]:
        with self.ready:
            while not self.queue and not self.closed:
                self.ready.wait()
            # Requests sent together arrive a few ms apart: while some are still being read, or fewer rows wait
            # than the last batch had, wait a moment for them so they share the batch (a lone client never waits).
            deadline = time.monotonic() + GATHER_SECONDS
            while time.monotonic() < deadline:
                waiting = sum(len(j.settings) for j in self.queue)
                if waiting >= self.max_batch or (len(self.queue) >= self.in_flight and waiting >= self.last_rows):
                    break
                self.ready.wait(deadline - time.monotonic())
            batch, rows = [], 0
            while self.queue and (not batch or rows + len(self.queue[0].settings) <= self.max_batch):
                job = self.queue.pop(0)
                batch.append(job)
                rows += len(job.settings)
            self.last_rows = rows
            return batch

    def _loop(self) -> None:
        while not self.closed:
            batch = self._take()
            if not batch:
                continue
            prompts = [job.prompt for job in batch for _ in job.settings]
            settings = [s for job in batch for s in job.settings]
            try:
                with self.session.lock:
                    outputs = generate(self.session.serving_policy, prompts, settings)
            except BaseException as error:  # reported to every request of the batch as HTTP 500
                for job in batch:
                    job.error = error
                    job.done.set()
                continue
            start = 0
            for job in batch:
                job.outputs = outputs[start : start + len(job.settings)]
                job.batch_rows = len(prompts)
                start += len(job.settings)
                job.done.set()

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()


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

    def _sampling(self, body: dict, prompt: list[int]) -> list[Sampling]:
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
            )
            for i in range(n)
        ]

    def _run(self, prompt: list[int], body: dict) -> Job:
        job = self.batcher.run(Job(prompt, self._sampling(body, prompt)))
        if job.error is not None:
            raise job.error
        return job

    def _text(self, out: Generated) -> str:
        if out.stop_text is not None:
            return out.stop_text
        ids = out.ids[:-1] if out.ids and out.ids[-1] in self.policy.stop_ids else out.ids
        return self.policy.decode(ids)

    def _logprobs(self, out: Generated) -> dict:
        entries = []
        for k, (token_id, logprob) in enumerate(zip(out.ids, out.logprobs)):
            token, raw = self.policy.token_info(token_id)
            entry = {"token": token, "logprob": logprob, "bytes": raw, "top_logprobs": []}
            for top_id, top_logprob in out.top[k] if out.top else []:
                top_token, top_raw = self.policy.token_info(top_id)
                entry["top_logprobs"].append({"token": top_token, "logprob": top_logprob, "bytes": top_raw})
            entries.append(entry)
        return {"content": entries}

    @staticmethod
    def _usage(prompt: list[int], outputs: list[Generated]) -> dict:
        completion = sum(len(o.ids) for o in outputs)
        return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}

    def chat(self, body: dict) -> tuple[dict, int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("'messages' must be a non-empty list of message objects", "messages")
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise RequestError("'tools' must be a list of tool objects", "tools")
        prompt = self.policy.render_prompt(messages, tools)
        job = self._run(prompt, body)
        parse_tools = tools if body.get("tool_choice") != "none" else None
        choices = []
        for index, out in enumerate(job.outputs):
            content, calls = self.policy.parse_output(self._text(out), parse_tools)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice = {
                "index": index,
                "message": message,
                "finish_reason": "tool_calls" if calls else out.finish_reason,
                "logprobs": self._logprobs(out) if body.get("logprobs") else None,
            }
            if body.get("return_token_ids"):
                choice["token_ids"] = out.ids
            choices.append(choice)
        return self._envelope("chatcmpl", "chat.completion", body, prompt, job, choices)

    def text(self, body: dict) -> tuple[dict, int]:
        prompt_text = body.get("prompt")
        if not isinstance(prompt_text, str):
            raise RequestError("'prompt' must be a string", "prompt")
        prompt = self.policy.encode_prompt(prompt_text)
        job = self._run(prompt, body)
        choices = []
        for index, out in enumerate(job.outputs):
            choice = {"index": index, "text": self._text(out), "finish_reason": out.finish_reason, "logprobs": None}
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "tokens": [self.policy.token_info(i)[0] for i in out.ids],
                    "token_logprobs": out.logprobs,
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = out.ids
            choices.append(choice)
        return self._envelope("cmpl", "text_completion", body, prompt, job, choices)

    def _envelope(self, prefix: str, kind: str, body: dict, prompt: list, job, choices: list) -> tuple[dict, int]:
        """The response around the choices: a unique id, usage, and the prompt's token ids when asked for."""
        response = {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model") or self.policy.name,
            "choices": choices,
            "usage": self._usage(prompt, job.outputs),
        }
        if body.get("return_token_ids"):
            response["prompt_token_ids"] = prompt
        return response, job.batch_rows


def stream_chunks(response: dict) -> list[dict]:
    """A finished chat completion as OpenAI stream chunks: role, one content or tool-call delta (with its
    logprobs and token ids), finish. Chunks are written once the batch is generated (tiny completions take
    milliseconds; per-token streaming would not change what is captured)."""
    base = {
        "id": response["id"],
        "object": "chat.completion.chunk",
        "created": response["created"],
        "model": response["model"],
    }
    chunks = []
    for choice in response["choices"]:
        index, message = choice["index"], choice["message"]
        chunks.append(
            {
                **base,
                "choices": [{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            }
        )
        calls = [{"index": i, **call} for i, call in enumerate(message.get("tool_calls") or [])]
        delta = {
            "index": index,
            "delta": {"tool_calls": calls} if calls else {"content": message["content"] or ""},
            "finish_reason": None,
        }
        if choice["logprobs"] is not None:
            delta["logprobs"] = choice["logprobs"]
        if "token_ids" in choice:
            delta["token_ids"] = choice["token_ids"]
        chunks.append({**base, "choices": [delta]})
        chunks.append({**base, "choices": [{"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if "prompt_token_ids" in response:
        chunks[0]["prompt_token_ids"] = response["prompt_token_ids"]
    return chunks


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    completions: Completions  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # request lines stay out of the worker's stderr
        pass

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

    def _route_path(self) -> tuple[str, bool]:
        """The path without a `/greedy` prefix, and whether it had one (validation: temperature 0 whatever is asked)."""
        path = self.path.rstrip("/")
        greedy = path.startswith(GREEDY_PREFIX + "/")
        return (path[len(GREEDY_PREFIX) :] if greedy else path), greedy

    def do_GET(self) -> None:
        if self._route_path()[0] == "/v1/models":
            name = self.completions.policy.name
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "lightning"}]})
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        with self.completions.batcher.request():
            self._post()

    def _post(self) -> None:
        routes = {"/v1/chat/completions": self.completions.chat, "/v1/completions": self.completions.text}
        path, greedy = self._route_path()
        route = routes.get(path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if route is None:
                return self._error(404, f"no route POST {self.path}")
            try:
                body = json.loads(raw or b"null")
            except json.JSONDecodeError as error:
                raise RequestError(f"the body is not JSON: {error}")
            if not isinstance(body, dict):
                raise RequestError("the body must be a JSON object")
            if greedy:
                body = {**body, "temperature": 0.0}
            response, rows = route(body)
        except RequestError as error:
            return self._error(400, str(error), error.param)
        except Exception as error:  # a model failure answers this request; the server keeps running
            return self._error(500, f"{type(error).__name__}: {error}")
        headers = {"X-Lightning-Batch-Size": str(rows)}
        if body.get("stream") and route == self.completions.chat:
            self._stream(response, body, headers)
        else:
            self._send(200, response, headers)

    def _stream(self, response: dict, body: dict, headers: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.close_connection = True
        chunks = stream_chunks(response)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(
                {
                    **{k: chunks[0][k] for k in ("id", "object", "created", "model")},
                    "choices": [],
                    "usage": response["usage"],
                }
            )
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


class PolicyServer:
    def __init__(self, session, host: str, port: int, max_batch: int):
        self.batcher = Batcher(session, max_batch)
        handler = type("BoundHandler", (Handler,), {"completions": Completions(session, self.batcher)})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)
        self.thread.start()
        bound_host, bound_port = self.httpd.server_address[:2]
        self.url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.batcher.close()
