"""A streamed chat completion (`stream: true`): OpenAI chunks sent as the rows are decoded, not after.

After each decoding step the engine calls the job's `on_step` (batcher.Job), and `advance` sends, per choice, the
tokens decoded since the last event: their ids (`token_ids`, with `return_token_ids`) and logprobs (with
`logprobs`) exactly as they were sampled, and the text they add. Text is held back where it could still change
meaning: a trailing partial UTF-8 character, what may be the start of a stop string, trailing whitespace, and
whatever may still turn out to be a tool call (Policy.certain_content); it follows in the last delta, with the tool
calls, once the completion is parsed whole. Joined, the deltas are the non-streamed response: the same content,
tool calls, token ids and logprobs.
"""

from __future__ import annotations

from typing import Optional, Protocol

from .batcher import Job
from .generate import Generated, finish_reason


class EventSink(Protocol):
    """Where the events go (serve.py's exchange): the response head, then SSE events."""

    def begin_stream(self, batch_rows: int) -> None: ...

    def send_events(self, events: list) -> None: ...


def _held_by_stops(text: str, stops: list[str]) -> int:
    """Where `text` must be cut so that no stop string, whole or begun at its end, is sent."""
    cut = len(text)
    for stop in stops:
        if not stop:
            continue
        whole = text.find(stop)
        if whole >= 0:
            cut = min(cut, whole)
        for k in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:k]):
                cut = min(cut, len(text) - k)
                break
    return cut


class ChatStream:
    def __init__(self, completions, body: dict, job: Job, tools: Optional[list], sink: EventSink):
        self.completions, self.policy = completions, completions.policy
        self.body, self.job, self.tools, self.sink = body, job, tools, sink
        n = len(job.settings)
        self.tokens_sent = [0] * n
        self.text_sent = [""] * n
        self.head: Optional[dict] = None
        self.parsed: dict[int, tuple] = {}  # per choice, once done: parse_output's (content, tool calls)

    def advance(self) -> None:
        """Sends the events of the tokens decoded since the last call (after a step, and once the job is done); a
        job that fails before any event raises its error (an HTTP 500)."""
        done = self.job.done
        if done and self.job.error is not None:
            if self.head is None:
                raise self.job.error
            error = self.job.error
            self.sink.send_events([{"error": {"message": f"{type(error).__name__}: {error}", "type": "server_error"}}])
            return
        events = self._start() if self.head is None else []
        for index, row in enumerate(self.job.rows):
            event = self._delta(index, row.result, final=done)
            if event is not None:
                events.append(event)
        if done:
            events.extend(self._finish())
        if events:
            self.sink.send_events(events)

    def _start(self) -> list[dict]:
        response, rows = self.completions.envelope("chatcmpl", "chat.completion.chunk", self.body, self.job, [])
        self.head = {k: response[k] for k in ("id", "object", "created", "model")}
        self.sink.begin_stream(rows)
        first = {
            **self.head,
            "choices": [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                for i in range(len(self.job.settings))
            ],
        }
        if "prompt_token_ids" in response:
            first["prompt_token_ids"] = response["prompt_token_ids"]
        return [first]

    def _parsed(self, index: int, out: Generated) -> tuple:
        if index not in self.parsed:
            self.parsed[index] = self.policy.parse_output(self.completions.text_of(out), self.tools)
        return self.parsed[index]

    def _visible_text(self, index: int, out: Generated, count: int, final: bool) -> str:
        """What may be sent of the text so far: all of the content once final, else its certain part."""
        if final:
            return self._parsed(index, out)[0] or ""
        ids = out.ids[:count]
        if ids and ids[-1] in self.policy.stop_ids:
            ids = ids[:-1]
        text = self.policy.decode(ids).rstrip("\ufffd")  # a character whose bytes have not all come yet
        text = text[: _held_by_stops(text, self.job.settings[index].stop)].rstrip()
        return text[: self.policy.certain_content(text, self.tools)]

    def _delta(self, index: int, out: Generated, final: bool) -> Optional[dict]:
        count = len(out.ids)
        start = self.tokens_sent[index]
        text = self._visible_text(index, out, count, final)
        sent = self.text_sent[index]
        new_text = text[len(sent) :] if text.startswith(sent) else ""
        if count == start and not new_text:
            return None
        choice: dict = {"index": index, "delta": {"content": new_text} if new_text else {}, "finish_reason": None}
        if self.body.get("logprobs"):
            choice["logprobs"] = {"content": self.completions.logprob_entries(out, start, count)}
        if self.body.get("return_token_ids"):
            choice["token_ids"] = out.ids[start:count]
        self.tokens_sent[index], self.text_sent[index] = count, sent + new_text
        return {**self.head, "choices": [choice]}

    def _finish(self) -> list:
        events = []
        for index, out in enumerate(self.job.outputs):
            _, calls = self._parsed(index, out)
            if calls:
                delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
                events.append({**self.head, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})
            last = {"index": index, "delta": {}, "finish_reason": finish_reason(out, calls)}
            if out.stop_string is not None:
                last["stop_reason"] = out.stop_string  # as the non-streamed answer names it
            events.append({**self.head, "choices": [last]})
        if (self.body.get("stream_options") or {}).get("include_usage"):
            usage = self.completions.usage(self.job.prompt, self.job.outputs)
            events.append({**self.head, "choices": [], "usage": usage})
        events.append("[DONE]")
        return events
