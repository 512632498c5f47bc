"""Which channel should carry the step tokens? (docs/architecture.md, "The signalling channel")

Round-trip time of a one-byte token; the figures in that section of docs/architecture.md come
from this script.

The worker receives a token on its command channel and answers on the result channel, as a
VecSampler worker does around each step. Channels measured:

* ``queue``: a ``multiprocessing.Queue`` per worker for commands, one shared Queue for results;
* ``simplequeue``: the same with ``SimpleQueue`` (no feeder thread; a lock around the pipe);
* ``pipe``: one duplex ``Pipe`` per worker, ``send``/``recv`` (pickled objects);
* ``pipe-bytes``: the same with ``send_bytes``/``recv_bytes`` (vecsample's choice).

Run: ``python experiments/queue_choice.py --round-trips 5000 --repeats 5``
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import tyro


@dataclass
class Args:
    round_trips: int = 5000
    """round trips per measurement"""
    repeats: int = 5
    """measurements per channel; the median is reported"""
    context: Literal["fork", "forkserver", "spawn"] = "forkserver"
    """multiprocessing start method"""
    json: str | None = None
    """optional path for the raw results"""


def echo_queue(cmd: Any, res: Any) -> None:
    while (token := cmd.get()) is not None:
        res.put(token)


def echo_pipe(conn: Any) -> None:
    while (token := conn.recv()) is not None:
        conn.send(token)


def echo_pipe_bytes(conn: Any) -> None:
    while (token := conn.recv_bytes()) != b"":
        conn.send_bytes(token)


def time_queue(ctx: Any, kind: str, n: int) -> float:
    make = ctx.Queue if kind == "queue" else ctx.SimpleQueue
    cmd, res = make(), make()
    proc = ctx.Process(target=echo_queue, args=(cmd, res), daemon=True)
    proc.start()
    cmd.put(0)
    res.get()  # warm up: the worker is running
    start = time.perf_counter()
    for i in range(n):
        cmd.put(i)
        res.get()
    elapsed = time.perf_counter() - start
    cmd.put(None)
    proc.join()
    return elapsed / n


def time_pipe(ctx: Any, as_bytes: bool, n: int) -> float:
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=echo_pipe_bytes if as_bytes else echo_pipe, args=(child,),
                       daemon=True)
    proc.start()
    send, recv = (parent.send_bytes, parent.recv_bytes) if as_bytes else (parent.send, parent.recv)
    token: Any = b"\x01" if as_bytes else 1
    send(token)
    recv()
    start = time.perf_counter()
    for _ in range(n):
        send(token)
        recv()
    elapsed = time.perf_counter() - start
    send(b"" if as_bytes else None)
    proc.join()
    return elapsed / n


def main(args: Args) -> dict[str, float]:
    ctx = mp.get_context(args.context)
    channels = {
        "queue": lambda: time_queue(ctx, "queue", args.round_trips),
        "simplequeue": lambda: time_queue(ctx, "simple", args.round_trips),
        "pipe": lambda: time_pipe(ctx, False, args.round_trips),
        "pipe-bytes": lambda: time_pipe(ctx, True, args.round_trips),
    }
    samples: dict[str, list[float]] = {name: [] for name in channels}
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits every channel
        for name, measure in channels.items():
            samples[name].append(measure() * 1e6)
    medians = {name: statistics.median(v) for name, v in samples.items()}
    fastest = min(medians.values())
    print(f"{'channel':<12} {'median us/round trip':>22} {'x fastest':>10}")
    for name, us in medians.items():
        print(f"{name:<12} {us:>22.1f} {us / fastest:>10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples_us": samples, "median_us": medians}, f, indent=2)
    return medians


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
