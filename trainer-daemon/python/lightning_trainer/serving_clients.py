"""`python3 -m lightning_trainer.serving_clients URL CLIENTS REQUESTS`: the serving bench's clients (bench.py), in a
process of their own started fresh (not forked from the server's: a forked child leaves every page of the server's
memory copy-on-write, and the server then pays a page fault per page it writes — ~25% of its decoding time here).

CLIENTS concurrent clients, each on one kept-alive HTTP/1.1 connection (as an SDK's connection pool holds one), each
sending REQUESTS chat completions one after another: client c's request r is `request(c, r)`, the same prompt, seed and
max_tokens as the batched generate() baseline. The clients are tasks of one asyncio loop, as an async agent's
concurrent calls are (threads under one GIL spread a round's requests over 5-40 ms here, which the server would be
charged for). The clock starts once every connection is open. Prints {"tokensPerSecond": …}. Standard library only:
it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.parse

MAX_TOKENS = 48


def prompt(i: int) -> list[dict]:
    return [{"role": "user", "content": f"{i} plus {i * 7 % 100}"}]


def request(client: int, round_: int) -> tuple[list[dict], int]:
    """The messages and seed of a client's request in a round (the same for HTTP and for the baseline)."""
    return prompt(client * 1000 + round_), round_


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str, body: bytes) -> int:
    """Sends one request and reads its answer: the completion tokens it reports."""
    writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
    status_line = await reader.readline()
    length = None
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise RuntimeError(f"an answer without a Content-Length: {status_line!r}")
    payload = await reader.readexactly(length)
    if status_line.split()[1:2] != [b"200"]:
        raise RuntimeError(f"{status_line.decode('latin-1').strip()}: {payload[:200]!r}")
    return json.loads(payload)["usage"]["completion_tokens"]


async def run(url: str, clients: int, requests_per_client: int) -> tuple[int, float]:
    """The completion tokens of every client's requests, and the seconds they took once all were connected."""
    parts = urllib.parse.urlsplit(url)
    head = (
        f"POST {parts.path}/v1/chat/completions HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        "Content-Type: application/json\r\n"
    )
    connections = [await asyncio.open_connection(parts.hostname, parts.port) for _ in range(clients)]

    async def client(c: int) -> int:
        reader, writer = connections[c]
        tokens = 0
        for r in range(requests_per_client):
            messages, seed = request(c, r)
            body = json.dumps({"messages": messages, "max_tokens": MAX_TOKENS, "seed": seed}).encode()
            tokens += await _exchange(reader, writer, head, body)
        writer.close()
        return tokens

    started = time.perf_counter()
    counts = await asyncio.gather(*(client(c) for c in range(clients)))
    return sum(counts), time.perf_counter() - started


if __name__ == "__main__":
    url, clients, requests_per_client = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tokens, seconds = asyncio.run(run(url, clients, requests_per_client))
    print(json.dumps({"tokensPerSecond": tokens / seconds}))
