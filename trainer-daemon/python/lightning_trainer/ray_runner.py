"""`python -m lightning_trainer.ray_runner --address ADDRESS`: runs agent commands as Ray tasks on an existing Ray
cluster, for the daemon's batch runner (`lightning dataset run --ray`, `lightning train --ray`).

A Ray driver speaking JSON lines on stdin/stdout (PROTOCOL.md, "Ray runner"). Each `start` becomes one Ray task
that runs the command on some node, in its own process group, with the environment it was given on top of the
node's own; the task streams back where it runs, its output (the per-attempt log) and how it ended. `stop` cancels
the task (Ray raises KeyboardInterrupt in it: the agent's group gets SIGTERM, then SIGKILL). When stdin ends (the
runner went away) every task is cancelled; an agent whose Ray worker dies is killed with it (PR_SET_PDEATHSIG).
Only Ray itself is used for the distribution: no other channel between the nodes and this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import ray

#: How often a task sends the agent's new output, and how much at most per message.
LOG_EVERY_S = 0.5
LOG_CHUNK_BYTES = 256 * 1024


def _die_with_parent() -> None:
    """In the agent's child, before exec: its own process group, and SIGKILL when the Ray worker dies (Linux)."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _where() -> dict:
    context = ray.get_runtime_context()
    return {"nodeId": context.get_node_id(), "ip": ray.util.get_node_ip_address(), "host": socket.gethostname()}


@ray.remote(num_returns="streaming", max_retries=0)
def run_agent(spec: dict):
    """Runs one agent command; yields {"started"}, then {"log"} chunks, then {"exit"} (the Ray task's stream)."""
    where = _where()
    cwd = spec.get("cwd")
    if cwd is not None and not os.path.isdir(cwd):
        yield {
            "event": "exit",
            "code": None,
            "signal": None,
            "timedOut": False,
            "where": where,
            "error": f"the folder {cwd} does not exist on node {where['ip']} ({where['host']}): start the run "
            f"from a folder every node has, or ship it with --ray-working-dir",
        }
        return
    env = {**(spec.get("envDefaults") or {}), **os.environ, **spec["env"]}
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(
                spec["command"],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        except OSError as error:
            yield {
                "event": "exit",
                "code": None,
                "signal": None,
                "timedOut": False,
                "where": where,
                "unstartable": True,
                "error": f"cannot run {spec['command'][0]} on node {where['ip']}: {error}",
            }
            return
        yield {"event": "started", "where": where, "pid": proc.pid}
        timeout_ms, grace_s = spec.get("timeoutMs"), (spec.get("graceMs") or 2000) / 1000
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        sent, timed_out = 0, False
        try:
            while True:
                try:
                    proc.wait(timeout=LOG_EVERY_S)
                    done = True
                except subprocess.TimeoutExpired:
                    done = False
                if not done and deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    _stop_group(proc, grace_s)
                    done = True
                log.seek(sent)
                chunk = log.read(LOG_CHUNK_BYTES)
                while chunk:
                    sent += len(chunk)
                    yield {"event": "log", "data": chunk.decode("utf-8", "replace")}
                    chunk = log.read(LOG_CHUNK_BYTES) if done else b""
                if done:
                    break
        except KeyboardInterrupt:  # ray.cancel: stop the agent with its children
            _stop_group(proc, grace_s)
            raise
        finally:
            if proc.poll() is None:
                _stop_group(proc, grace_s)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # what the agent left running in its group
    code = proc.returncode
    yield {
        "event": "exit",
        "code": code if code is not None and code >= 0 else None,
        "signal": signal.Signals(-code).name if code is not None and code < 0 else None,
        "timedOut": timed_out,
        "where": where,
    }


class Driver:
    """The stdin/stdout side: one asyncio task per started agent, following its Ray task's stream."""

    def __init__(self, out, num_cpus: float):
        self.out = out
        self.num_cpus = num_cpus
        self.lock = threading.Lock()
        self.running: dict[str, Any] = {}
        self.follows: dict[str, asyncio.Task] = {}

    def write(self, message: dict) -> None:
        with self.lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def start(self, message: dict) -> None:
        run_id = message["id"]
        spec = {k: message.get(k) for k in ("command", "cwd", "env", "envDefaults", "timeoutMs", "graceMs")}
        stream = run_agent.options(
            num_cpus=message.get("numCpus", self.num_cpus), name=f"lightning-agent-{run_id}"
        ).remote(spec)
        self.running[run_id] = stream
        self.follows[run_id] = asyncio.ensure_future(self.follow(run_id, stream))

    async def follow(self, run_id: str, stream) -> None:
        ended = False
        where = None
        try:
            async for ref in stream:
                item = await ref
                where = item.get("where", where)
                event = item.pop("event")
                self.write({"type": event, "id": run_id, **item})
                ended = ended or event == "exit"
        except ray.exceptions.TaskCancelledError:
            self.write(
                {
                    "type": "exit",
                    "id": run_id,
                    "code": None,
                    "signal": None,
                    "timedOut": False,
                    "cancelled": True,
                    "where": where,
                }
            )
            ended = True
        except Exception as error:  # the node died, the worker crashed, the cluster went away
            self.write(
                {
                    "type": "exit",
                    "id": run_id,
                    "code": None,
                    "signal": None,
                    "timedOut": False,
                    "where": where,
                    "error": f"the Ray task failed{_on(where)}: {type(error).__name__}: {_first_line(error)}",
                }
            )
            ended = True
        finally:
            self.running.pop(run_id, None)
            self.follows.pop(run_id, None)
            if not ended:
                self.write(
                    {
                        "type": "exit",
                        "id": run_id,
                        "code": None,
                        "signal": None,
                        "timedOut": False,
                        "where": where,
                        "error": f"the Ray task ended without a result{_on(where)}",
                    }
                )

    def stop(self, message: dict) -> None:
        stream = self.running.get(message["id"])
        if stream is not None:
            ray.cancel(stream)

    def stop_all(self) -> None:
        for stream in list(self.running.values()):
            ray.cancel(stream)


def _on(where: dict | None) -> str:
    return f" on node {where['ip']} ({where['host']})" if where else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[-1] if text else ""


def nodes() -> list[dict]:
    return [
        {
            "nodeId": n["NodeID"],
            "ip": n["NodeManagerAddress"],
            "host": n.get("NodeManagerHostname"),
            "cpus": n.get("Resources", {}).get("CPU", 0),
            "alive": n["Alive"],
        }
        for n in ray.nodes()
    ]


async def serve(driver: Driver, stdin) -> None:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue = asyncio.Queue()

    def read() -> None:
        try:
            for line in stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)
        except RuntimeError:  # the loop ended first (shutdown)
            pass

    threading.Thread(target=read, daemon=True).start()
    while (line := await lines.get()) is not None:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            kind = message["type"]
            if kind == "start":
                driver.start(message)
            elif kind == "stop":
                driver.stop(message)
            elif kind == "shutdown":
                break
            else:
                raise ValueError(f"unknown type {kind!r} (known: start, stop, shutdown)")
        except (ValueError, KeyError, TypeError) as error:
            driver.write({"type": "error", "message": f"bad request line: {error}"})
    driver.stop_all()
    if driver.follows:
        await asyncio.wait(list(driver.follows.values()), timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="lightning_trainer.ray_runner", description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="the Ray cluster (ray://HOST:10001 or HOST:6379, or auto)")
    parser.add_argument("--working-dir", help="a folder shipped to every node; agents run in it (Ray runtime_env)")
    parser.add_argument("--num-cpus", type=float, default=1, help="CPUs each agent reserves (default 1)")
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # Ray's own prints go to the log, never the protocol
    sys.stdout = sys.stderr
    runtime_env = {"working_dir": args.working_dir} if args.working_dir else None
    try:
        ray.init(address=args.address, runtime_env=runtime_env, log_to_driver=False, logging_level="WARNING")
    except Exception as error:
        out.write(
            json.dumps(
                {
                    "type": "fatal",
                    "message": f"cannot connect to the Ray cluster at {args.address}: "
                    f"{type(error).__name__}: {_first_line(error)}",
                }
            )
            + "\n"
        )
        out.flush()
        sys.exit(1)
    driver = Driver(out, args.num_cpus)
    ready = {"type": "ready", "ray": ray.__version__, "address": args.address, "nodes": nodes()}
    # One line per connection in the log: a run's log shows how often its driver (re)connected.
    sys.stderr.write(
        f"lightning ray runner {os.getpid()}: connected to {args.address} (ray {ray.__version__}, "
        f"{sum(n['alive'] for n in ready['nodes'])} nodes alive)\n"
    )
    sys.stderr.flush()
    driver.write(ready)
    try:
        asyncio.run(serve(driver, sys.stdin))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
