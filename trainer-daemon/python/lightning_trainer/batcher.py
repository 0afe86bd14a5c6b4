"""The policy server's engine: continuous batching of the requests' rows (serve.py's docstring), one step at a time.

The engine runs on the server's event loop, on the thread that also reads and answers the HTTP requests
(http_front.py): each turn of the loop takes the requests that arrived, then one decoding step (`_tick`), or a few
while none answers a job (STEP_SLICE_SECONDS): with a turn of the loop and its I/O poll for every step, the tiny
policy at 8 clients served 0.88-0.91x the tokens/s of batched generate() in paired runs of the bench here, with a few
steps a turn 0.90-0.96x (noisy: single runs range wider). Rows of every admitted job are decoded together
(generate.Decoder), up to maxBatch rows; between two steps finished rows leave (their job's `on_done` answers it)
and queued jobs join, their prompts prefilled together. A streaming job's `on_step` is called after each step that
gave its rows tokens. Decoding on the loop's own thread (not in an executor thread beside it) saves two thread
hand-offs per step: ~0.1 ms each here, against a tiny model's 2-4 ms step.

The engine holds the session lock for a busy spell (from the first admitted row until no row is left): a weight
update never lands inside a completion. When an update waits for the lock no job joins, the lock is released as soon
as the rows in flight finish, and the engine takes it again (without blocking the loop) once the update is done.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from .generate import Decoder, Generated, Row, Sampling

GATHER_SECONDS = 0.005  # with the engine idle, how long requests sent together may take to arrive (see _gather_wait)
LOCK_RETRY_SECONDS = 0.005  # how often an engine with work asks again for a lock an update holds
STEP_SLICE_SECONDS = 0.002  # how long after its first step a turn of the loop may go on decoding (_tick)


class ClientGone(Exception):
    """The request's client closed its connection while its completion was being decoded: its rows were dropped."""


@dataclass
class Job:
    prompt: list[int]
    settings: list[Sampling]
    on_done: Optional[Callable[[Job], None]] = None  # called once, when outputs (or error) are set
    on_step: Optional[Callable[[Job], None]] = None  # after each step that gave its rows tokens (streaming)
    outputs: Optional[list[Generated]] = None
    error: Optional[BaseException] = None
    batch_rows: int = 0  # the most rows decoded together while this job's were
    rows: list[Row] = field(default_factory=list)
    cancelled: bool = False  # its client left: the engine drops its rows before the next step
    done: bool = False

    def finish(self, error: Optional[BaseException] = None) -> None:
        if self.done:
            return
        self.done, self.error = True, error
        self.outputs = None if error else [row.result for row in self.rows]
        _call(self.on_done, self)

    def stepped(self) -> None:
        _call(self.on_step, self)


def _call(callback: Optional[Callable[[Job], None]], job: Job) -> None:
    """A job's callback; its failure is the loop's to report (the engine goes on with the other rows)."""
    if callback is None:
        return
    try:
        callback(job)
    except Exception as error:
        asyncio.get_running_loop().call_exception_handler(
            {"message": "a policy server callback failed", "exception": error}
        )


class Batcher:
    """Queued jobs and the decoder of a busy spell; every method runs on the loop's thread once `attach`ed."""

    def __init__(self, session, max_batch: int):
        self.session = session
        self.lock = session.lock
        self.max_batch = max_batch
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.queue: deque[Job] = deque()
        self.closed = False
        self.last_rows = 0  # the most rows of the last busy spell: how many a new spell waits a moment for
        self.dropped_rows = 0  # rows dropped because their client left (a count for the tests and the logs)
        self.decoder: Optional[Decoder] = None  # during a busy spell, which holds the session lock
        self.active: list[Job] = []
        self.peak = 0
        self.steps = 0  # decoding steps, and prefills (admissions into a batch): counts the bench reports
        self.prefills = 0
        self.gather_deadline: Optional[float] = None
        self._handle: Optional[asyncio.Handle] = None
        self._handle_soon = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def submit(self, job: Job) -> Job:
        """Queues the job; it is decoded from the next step on (`on_done` is called when it has finished)."""
        if self.closed:
            raise RuntimeError("the policy server is shutting down")
        self.queue.append(job)
        self._schedule(0)
        return job

    def cancel(self, job: Job) -> None:
        """Its client left: a queued job is dropped now, a decoding one's rows leave before the next step."""
        if job in self.queue:
            self.queue.remove(job)
            job.finish(ClientGone())
        elif not job.done:
            job.cancelled = True

    def decoding(self) -> int:
        """How many rows are being decoded now (read from any thread)."""
        decoder = self.decoder
        return len(decoder.rows) if decoder else 0

    def close(self) -> None:
        """Every job not answered yet fails; the lock is released (called on the loop's thread)."""
        self.closed = True
        if self._handle is not None:
            self._handle.cancel()
        error = RuntimeError("the policy server is shutting down")
        for job in [*self.queue, *self.active]:
            job.finish(error)
        self.queue.clear()
        if self.decoder is not None:
            self._end_spell()

    # --- scheduling ---------------------------------------------------------------------------------------------
    def _schedule(self, delay: float) -> None:
        """A tick after `delay` seconds (0: after the loop has taken the I/O that is ready), unless one comes sooner."""
        if self._handle is not None:
            if self._handle_soon or delay > 0:
                return
            self._handle.cancel()
        if delay > 0:
            self._handle, self._handle_soon = self.loop.call_later(delay, self._tick), False
        else:
            self._handle, self._handle_soon = self.loop.call_soon(self._tick), True

    def _gather_wait(self) -> float:
        """With the engine idle and a job queued: requests sent together arrive a few ms apart, so while fewer rows
        wait than the last busy spell had, wait up to GATHER_SECONDS for them to share the first prefill (a lone
        client never waits). How long is left to wait."""
        waiting = sum(len(job.settings) for job in self.queue)
        if waiting >= min(self.max_batch, max(1, self.last_rows)):
            return 0.0
        now = time.monotonic()
        if self.gather_deadline is None:
            self.gather_deadline = now + GATHER_SECONDS
        return max(0.0, self.gather_deadline - now)

    def _tick(self) -> None:
        """One turn: start a busy spell if idle, admit queued jobs, decode a step (more while no job is answered, up to
        STEP_SLICE_SECONDS), answer what finished."""
        self._handle = None
        if self.closed:
            return
        if self.decoder is None and not self._start_spell():
            return
        if self.queue and not self.lock.waiting:
            self._admit()
        # More steps in this turn while none of them answers a job (an answer may bring its client's next request,
        # which only the loop's I/O can read), the batch has as many rows as the last busy spell had (else more
        # requests are likely on their way, to be admitted at the next step), and for STEP_SLICE_SECONDS after the
        # first step at most: each turn of the loop costs its I/O poll.
        going = self._step()
        started = time.monotonic()
        while going and len(self.decoder.rows) >= self.last_rows and time.monotonic() - started < STEP_SLICE_SECONDS:
            going = self._step()
        if self.decoder.rows:
            self._schedule(0)
            return
        self._end_spell()
        if self.queue:
            self._schedule(0)

    def _start_spell(self) -> bool:
        """Takes the session lock for a busy spell, when a job is queued and the moment has come."""
        if not self.queue:
            return False
        wait = self._gather_wait()
        if wait > 0:
            self._schedule(wait)
            return False
        # An update asked for the lock first: it goes before the next busy spell. One that holds it keeps it.
        if self.lock.waiting or not self.lock.acquire(blocking=False):
            self._schedule(LOCK_RETRY_SECONDS)
            return False
        self.decoder, self.active, self.peak, self.gather_deadline = Decoder(self.session.serving_policy), [], 0, None
        return True

    def _end_spell(self) -> None:
        self.last_rows, self.decoder, self.active = self.peak, None, []
        self.lock.release()

    # --- decoding -----------------------------------------------------------------------------------------------
    def _take(self, room: int) -> list[Job]:
        """Queued jobs (in order) whose rows fit in `room`."""
        jobs = []
        while self.queue and len(self.queue[0].settings) <= room:
            job = self.queue.popleft()
            room -= len(job.settings)
            jobs.append(job)
        return jobs

    def _admit(self) -> None:
        decoder = self.decoder
        jobs = self._take(self.max_batch - len(decoder.rows))
        if not jobs:
            return
        self.prefills += 1
        try:
            rows = decoder.add(
                [job.prompt for job in jobs for _ in job.settings], [s for job in jobs for s in job.settings]
            )
        except Exception as error:  # these requests get an HTTP 500; the rows in flight go on
            for job in jobs:
                job.finish(error)
            return
        start = 0
        for job in jobs:
            job.rows = rows[start : start + len(job.settings)]
            start += len(job.settings)
            if all(row.done for row in job.rows):  # no room left for a token: answered at once
                job.finish()
            else:
                self.active.append(job)
        for job in self.active:
            job.batch_rows = max(job.batch_rows, len(decoder.rows))

    def _drop_cancelled(self) -> None:
        """A cancelled job's rows are marked done, so this step takes them out of the batch (and its KV cache) like
        rows that finished."""
        still = []
        for job in self.active:
            if not job.cancelled:
                still.append(job)
                continue
            for row in job.rows:
                if not row.done:
                    row.done = True
                    self.dropped_rows += 1
            job.finish(ClientGone())
        self.active = still

    def _step(self) -> bool:
        """One decoding step; whether the batch goes on with no job answered (another step may follow at once)."""
        decoder = self.decoder
        if not decoder.rows:
            return False
        self.peak = max(self.peak, len(decoder.rows))
        self._drop_cancelled()
        try:
            finished = decoder.step()
        except Exception as error:  # reported to every request in flight as HTTP 500
            for job in self.active:
                job.finish(error)
            self.active = []
            decoder.clear()
            return False
        self.steps += 1
        still = []
        for job in self.active:
            if finished and all(row.done for row in job.rows):
                job.finish()
            else:
                still.append(job)
                job.stepped()
        answered = len(still) < len(self.active)
        self.active = still
        return bool(decoder.rows) and not answered
