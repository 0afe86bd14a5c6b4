"""The policy server's engine: continuous batching of the requests' rows on one thread (serve.py's docstring).

Request threads queue Jobs; the engine thread decodes every admitted job's rows together (generate.Decoder), up to
maxBatch rows. Between two steps finished rows leave (their job is answered once all its rows are done) and queued
jobs join, their prompts prefilled together. A streaming job is told after each step that its rows have new tokens
(`Job.wait_progress`), so its request thread can send them while the rest are decoded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional

from .generate import Decoder, Generated, Row, Sampling

GATHER_SECONDS = 0.005
CLIENT_CHECK_SECONDS = 0.1  # how often a request waiting for its completion checks that its client is still there


class ClientGone(Exception):
    """The request's client closed its connection while its completion was being decoded: its rows were dropped."""


@dataclass
class Job:
    prompt: list[int]
    settings: list[Sampling]
    stream: bool = False  # whether the request thread follows the rows step by step
    done: threading.Event = field(default_factory=threading.Event)
    outputs: Optional[list[Generated]] = None
    error: Optional[BaseException] = None
    batch_rows: int = 0  # the most rows decoded together while this job's were
    rows: list[Row] = field(default_factory=list)
    cancelled: bool = False  # its client left: the engine drops its rows before the next step
    steps: int = 0  # decoding steps taken with this job's rows (what a streaming reader waits on)
    progress: threading.Condition = field(default_factory=threading.Condition)

    def finish(self, error: Optional[BaseException] = None) -> None:
        self.error = error
        self.outputs = None if error else [row.result for row in self.rows]
        with self.progress:
            self.done.set()
            self.progress.notify_all()

    def stepped(self) -> None:
        with self.progress:
            self.steps += 1
            self.progress.notify_all()

    def wait_progress(self, seen: int) -> int:
        """Blocks until a step after the `seen`-th was taken or the job is done; the steps taken so far."""
        with self.progress:
            while self.steps <= seen and not self.done.is_set():
                self.progress.wait()
            return self.steps


class Batcher:
    """A queue of jobs and the thread decoding them (continuous batching, see the module docstring)."""

    def __init__(self, session, max_batch: int):
        self.session = session
        self.max_batch = max_batch
        self.queue: list[Job] = []
        self.ready = threading.Condition()
        self.closed = False
        self.arriving = 0  # HTTP requests being read and tokenized: they will be queued in a moment
        self.local = threading.local()  # per request thread: whether it still counts as arriving
        self.last_rows = 0
        self.dropped_rows = 0  # rows dropped because their client left (a count for the tests and the logs)
        self.decoder: Optional[Decoder] = None  # during a busy spell
        self.thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.thread.start()

    @contextlib.contextmanager
    def request(self, gone=None) -> Iterator[None]:
        """Brackets an HTTP request, so the engine knows more work is on its way until it is queued; `gone()` says
        whether its client has left (its job is then cancelled)."""
        with self.ready:
            self.arriving += 1
        self.local.arriving = True
        self.local.gone = gone
        try:
            yield
        finally:
            self.local.gone = None
            with self.ready:
                self._arrived()

    def _arrived(self) -> None:
        if getattr(self.local, "arriving", False):
            self.local.arriving = False
            self.arriving -= 1
            self.ready.notify_all()

    def submit(self, job: Job) -> Job:
        """Queues the job; it is decoded from the next step on (job.done is set when it has finished)."""
        with self.ready:
            if self.closed:
                raise RuntimeError("the policy server is shutting down")
            self.queue.append(job)
            self._arrived()
            self.ready.notify_all()
        return job

    def run(self, job: Job) -> Job:
        return self.wait(self.submit(job))

    def wait(self, job: Job) -> Job:
        """Until the job is done; a request thread whose client leaves meanwhile cancels it."""
        gone = getattr(self.local, "gone", None)
        while not job.done.wait(CLIENT_CHECK_SECONDS if gone else None):
            if gone():
                self.cancel(job)
                job.done.wait()
        return job

    def cancel(self, job: Job) -> None:
        """Its client left: a queued job is dropped now, a decoding one's rows leave before the next step."""
        with self.ready:
            if job in self.queue:
                self.queue.remove(job)
                job.finish(ClientGone())
                return
            job.cancelled = True

    def _drop_cancelled(self, active: list[Job]) -> list[Job]:
        """The jobs still wanted; a cancelled one's rows are marked done, so the next step takes them out of the
        batch (and its KV cache) like rows that finished."""
        still = []
        for job in active:
            if not job.cancelled:
                still.append(job)
                continue
            for row in job.rows:
                if not row.done:
                    row.done = True
                    self.dropped_rows += 1
            job.finish(ClientGone())
        return still

    def _gather(self) -> None:
        """With the engine idle and a job queued: requests sent together arrive a few ms apart, so while some are
        still being read, or fewer rows wait than the last busy spell had, wait a moment for them to share the first
        prefill (a lone client never waits). Called holding `ready`."""
        deadline = time.monotonic() + GATHER_SECONDS
        while time.monotonic() < deadline and not self.closed:
            waiting = sum(len(j.settings) for j in self.queue)
            if waiting >= self.max_batch or (not self.arriving and waiting >= self.last_rows):
                break
            self.ready.wait(deadline - time.monotonic())

    def _take(self, room: int) -> list[Job]:
        """Queued jobs (in order) whose rows fit in `room`."""
        with self.ready:
            jobs = []
            while self.queue and len(self.queue[0].settings) <= room:
                job = self.queue.pop(0)
                room -= len(job.settings)
                jobs.append(job)
            return jobs

    def _admit(self, decoder: Decoder, active: list[Job]) -> None:
        jobs = self._take(self.max_batch - len(decoder.rows))
        if not jobs:
            return
        try:
            rows = decoder.add(
                [job.prompt for job in jobs for _ in job.settings], [s for job in jobs for s in job.settings]
            )
        except BaseException as error:  # these requests get an HTTP 500; the rows in flight go on
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
                active.append(job)
        for job in active:
            job.batch_rows = max(job.batch_rows, len(decoder.rows))

    def _loop(self) -> None:
        lock = self.session.lock
        while True:
            with self.ready:
                while not self.queue and not self.closed:
                    self.ready.wait()
                if self.closed:
                    break
                self._gather()
            while lock.waiting:  # an update asked for the lock first: it goes before the next busy spell
                time.sleep(0.0005)
            with lock:
                self._busy_spell(lock)
        with self.ready:
            for job in self.queue:
                job.finish(RuntimeError("the policy server is shutting down"))
            self.queue.clear()

    def _busy_spell(self, lock) -> None:
        """Decode until no row is left, admitting queued jobs between steps unless an update waits for the lock."""
        decoder, active, peak = Decoder(self.session.serving_policy), [], 0
        self.decoder = decoder
        self._admit(decoder, active)
        while decoder.rows:
            peak = max(peak, len(decoder.rows))
            active = self._drop_cancelled(active)
            try:
                finished = decoder.step()
            except BaseException as error:  # reported to every request in flight as HTTP 500
                for job in active:
                    job.finish(error)
                decoder.clear()
                break
            if finished:
                still = []
                for job in active:
                    if all(row.done for row in job.rows):
                        job.finish()
                    else:
                        still.append(job)
                active = still
            for job in active:
                if job.stream:
                    job.stepped()
            if not lock.waiting and not self.closed and self.queue:
                self._admit(decoder, active)
        self.last_rows, self.decoder = peak, None

    def decoding(self) -> int:
        """How many rows are being decoded now."""
        decoder = self.decoder
        return len(decoder.rows) if decoder else 0

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()
