"""The policy's OpenAI-compatible HTTP endpoint, with continuous batching across concurrent requests.

One thread serves it: an asyncio loop (http_front.py: HTTP/1.1, keep-alive, the gate) that, between two decoding
steps of the engine (batcher.py), reads the requests that arrived, validates and tokenizes them into Jobs, and answers
the jobs that finished. The engine decodes every admitted job's rows together (generate.Decoder; a request with n
choices is n rows, up to maxBatch rows at once). Between two decoding steps, finished rows leave (their request is
answered as soon as all its rows are done) and waiting jobs join (their prompts prefilled together), so a short
completion never waits for a long one and a new request never waits for the batch to end. Each row keeps its own
max_tokens, stop strings, temperature, top_p and seed, so a request gets the tokens it would get alone. The engine
holds the session lock while any row is being decoded (a weight update never lands inside a completion); when an
update waits for it, no new job joins and the lock is released as soon as the rows in flight finish. Responses carry
the exact token ids (vLLM-style `prompt_token_ids` / `choices[i].token_ids` when the request says
`return_token_ids: true`) and per-token logprobs of the policy itself. `X-Lightning-Batch-Size` tells the most rows
the request was decoded with.

The server is as closed as the daemon: every route lives under a per-server capability path `/p/<key>` (the URL the
worker answers `serve` with; the daemon forwards to it and scrubs it like `/r/<key>`), the Host must be a loopback
name with the server's port (DNS rebinding), a request with an `Origin` (a web page) is refused, a POST must be
`application/json` with a Content-Length under the body cap (http_front.Gate). And as robust: a connection's headers,
body and idle time are bounded (http_front.READ_TIMEOUT_SECONDS: a body that never arrives is a 408), a body nested
too deep is a 400, and a request whose client leaves while it is decoded has its rows dropped from the batch before
the next step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import secrets
import threading
import time
import uuid
from typing import Any, Optional

from . import http_front
from .batcher import Batcher, ClientGone, Job
from .generate import Generated, Sampling, finish_reason
from .http_front import KEY_PREFIX, MAX_BODY_BYTES, Exchange, Request, error_body
from .stream import ChatStream

__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "PolicyServer", "RequestError"]

DEFAULT_MAX_TOKENS = 1024  # when a request names no max_tokens
GREEDY_PREFIX = "/greedy"  # the same routes at temperature 0: validation rollouts with an unchanged agent
ADAPTER_PREFIX = "/adapter/"  # /adapter/<policy>: several policies, this one's adapter answers (after /greedy)
BASE_PREFIX = "/base"  # several policies: the base model answers, no adapter
MAX_JSON_DEPTH = 128  # a body nested deeper is a 400: json and the chat templates would recurse that deep


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


MAX_STOPS = 16


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    # More than OpenAI's 4: Gemini agents send up to 5, Anthropic's more, and their calls are translated to this API.
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOPS:
        raise RequestError(f"'stop' must be a string or a list of up to {MAX_STOPS} strings", "stop")
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

    def chat_job(self, body: dict, adapter: Optional[str] = None) -> tuple[Job, Optional[list]]:
        """The request's job, not queued yet, and the tools its output is parsed with."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("'messages' must be a non-empty list of message objects", "messages")
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise RequestError("'tools' must be a list of tool objects", "tools")
        prompt = self.policy.render_prompt(messages, tools)
        return Job(prompt, self._sampling(body, prompt, adapter)), tools if body.get("tool_choice") != "none" else None

    def chat(self, body: dict, job: Job, parse_tools: Optional[list]) -> tuple[dict, int]:
        """The chat completion of a finished job."""
        choices = []
        for index, out in enumerate(job.outputs):
            content, calls = self.policy.parse_output(self.text_of(out), parse_tools)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice = {
                "index": index,
                "message": message,
                "finish_reason": finish_reason(out, calls),
                "logprobs": {"content": self.logprob_entries(out)} if body.get("logprobs") else None,
            }
            if out.stop_string is not None:
                choice["stop_reason"] = out.stop_string  # which stop string ended it, as vLLM says
            if body.get("return_token_ids"):
                choice["token_ids"] = out.ids
            choices.append(choice)
        return self.envelope("chatcmpl", "chat.completion", body, job, choices)

    def text_job(self, body: dict, adapter: Optional[str] = None) -> Job:
        prompt_text = body.get("prompt")
        if not isinstance(prompt_text, str):
            raise RequestError("'prompt' must be a string", "prompt")
        prompt = self.policy.encode_prompt(prompt_text)
        if not prompt:
            raise RequestError("'prompt' is empty (no tokens): give the text to continue", "prompt")
        return Job(prompt, self._sampling(body, prompt, adapter))

    def text(self, body: dict, job: Job, _tools: Optional[list] = None) -> tuple[dict, int]:
        """The text completion of a finished job."""
        choices = []
        for index, out in enumerate(job.outputs):
            choice = {"index": index, "text": self.text_of(out), "finish_reason": out.finish_reason, "logprobs": None}
            if out.stop_string is not None:
                choice["stop_reason"] = out.stop_string
            # An integer here (0 too: the sampled tokens' logprobs without alternatives), not chat's boolean.
            if body.get("logprobs") is not None and body.get("logprobs") is not False:
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


class Routes:
    """The endpoint's routes (http_front.Application): a request becomes a job for the engine, and the job, once
    done, the response; all on the loop's thread."""

    def __init__(self, completions: Completions):
        self.completions = completions
        self.batcher = completions.batcher

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

    def handle(self, request: Request, exchange: Exchange) -> None:
        try:
            path, greedy, adapter = self._route_path(request.path)
        except RequestError as error:
            return _error(exchange, 404, str(error))
        if request.method == "GET":
            if path == "/v1/models":
                name = self.completions.policy.name
                return _send(
                    exchange,
                    200,
                    {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "lightning"}]},
                )
            return _error(exchange, 404, f"no route GET {request.path}")
        kinds = {"/v1/chat/completions": "chat", "/v1/completions": "text"}
        kind = kinds.get(path)
        if kind is None:
            return _error(exchange, 404, f"no route POST {request.path}")
        try:
            body = _parse_json(request.body)
            if greedy:
                body = {**body, "temperature": 0.0}
            if kind == "chat":
                job, tools = self.completions.chat_job(body, adapter)
            else:
                job, tools = self.completions.text_job(body, adapter), None
            if kind == "chat" and body.get("stream"):
                self._stream(body, job, tools, exchange)
            elif body.get("stream"):
                job.on_done = lambda done: self._answer_text_stream(exchange, body, done)
            else:
                job.on_done = lambda done: self._answer(exchange, kind, body, done, tools)
            exchange.on_gone = lambda: self.batcher.cancel(job)
            self.batcher.submit(job)
        except RequestError as error:
            _error(exchange, 400, str(error), error.param)
        except RecursionError:
            _error(exchange, 400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
        except Exception as error:  # a model failure answers this request; the server keeps running
            _error(exchange, 500, f"{type(error).__name__}: {error}")

    def _answer(self, exchange: Exchange, kind: str, body: dict, job: Job, tools: Optional[list]) -> None:
        if isinstance(job.error, ClientGone):
            return  # nobody to answer: its rows were dropped
        try:
            if job.error is not None:
                raise job.error
            build = self.completions.chat if kind == "chat" else self.completions.text
            response, rows = build(body, job, tools)
        except Exception as error:  # a model failure answers this request; the server keeps running
            return _error(exchange, 500, f"{type(error).__name__}: {error}")
        _send(exchange, 200, response, {"X-Lightning-Batch-Size": str(rows)})

    def _answer_text_stream(self, exchange: Exchange, body: dict, job: Job) -> None:
        """A streamed text completion (`/v1/completions` with `stream: true`), sent once the job is done: one event per
        choice with its whole text, its finish reason and token ids as the non-streamed answer has them, the usage
        when `stream_options.include_usage` asks, then `[DONE]`. A failure is an HTTP error like any other."""
        if isinstance(job.error, ClientGone):
            return
        try:
            if job.error is not None:
                raise job.error
            response, rows = self.completions.text(body, job)
        except Exception as error:  # a model failure answers this request; the server keeps running
            return _error(exchange, 500, f"{type(error).__name__}: {error}")
        head = {key: response[key] for key in ("id", "object", "created", "model") if key in response}
        events: list = [{**head, "choices": [choice]} for choice in response["choices"]]
        if "prompt_token_ids" in response and events:
            events[0]["prompt_token_ids"] = response["prompt_token_ids"]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**head, "choices": [], "usage": response.get("usage")})
        events.append("[DONE]")
        sink = _EventSink(exchange)
        sink.begin_stream(rows)
        sink.send_events(events)
        exchange.end()

    def _stream(self, body: dict, job: Job, tools: Optional[list], exchange: Exchange) -> None:
        """A streamed chat completion: its tokens as they are decoded (stream.ChatStream). A failure before the first
        event is an HTTP error like any other; after it, an error event ends the stream."""
        sink = _EventSink(exchange)
        stream = ChatStream(self.completions, body, job, tools, sink)

        def advance(_job: Job) -> None:
            try:
                stream.advance()
            except ClientGone:
                return
            except Exception as error:  # the stream's own failure: its rows leave the batch, the others go on
                job.on_step = job.on_done = None
                self.batcher.cancel(job)
                message = f"{type(error).__name__}: {error}"
                if not exchange.streaming:  # before the first event: an HTTP 500
                    return _error(exchange, 500, message)
                sink.send_events([{"error": {"message": message, "type": "server_error"}}])
                return exchange.end()
            if job.done:
                exchange.end()

        job.on_step = job.on_done = advance


class _EventSink:
    """stream.EventSink on an exchange: the response head, then SSE events."""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def begin_stream(self, batch_rows: int) -> None:
        self.exchange.begin(
            {
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Lightning-Batch-Size": str(batch_rows),
            }
        )

    def send_events(self, events: list) -> None:
        """SSE events (JSON objects, or "[DONE]"), written together."""
        data = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
        self.exchange.write(data.encode())


def _send(exchange: Exchange, status: int, body: dict, headers: Optional[dict] = None) -> None:
    exchange.respond(status, json.dumps(body).encode(), headers)


def _error(exchange: Exchange, status: int, message: str, param: Optional[str] = None) -> None:
    exchange.respond(status, error_body(status, message, param))


class PolicyServer:
    """The endpoint on its own thread: one event loop running the HTTP front end and the engine."""

    def __init__(self, session, host: str, port: int, max_batch: int):
        self.batcher = Batcher(session, max_batch)
        self.key = secrets.token_urlsafe(24)  # 32 characters, as a rollout key
        self.loop = asyncio.new_event_loop()
        routes = Routes(Completions(session, self.batcher))
        listening: concurrent.futures.Future = concurrent.futures.Future()
        self.thread = threading.Thread(
            target=self._run, args=(host, port, routes, listening), name="policy-server", daemon=True
        )
        self.thread.start()
        self.front: http_front.Front = listening.result()  # a bind error is raised here
        bound_host, bound_port = self.front.address[:2]
        self.url = (
            f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}{KEY_PREFIX}{self.key}"
        )

    def _run(self, host: str, port: int, routes: Routes, listening: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            front = self.loop.run_until_complete(http_front.listen(host, port, routes, http_front.Gate(self.key)))
        except BaseException as error:
            listening.set_exception(error)
            return
        self.batcher.attach(self.loop)
        listening.set_result(front)
        self.loop.run_forever()

    def close(self) -> None:
        def stop() -> None:
            self.front.close()
            self.batcher.close()
            self.loop.stop()

        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(stop)
            self.thread.join()
        self.loop.close()
