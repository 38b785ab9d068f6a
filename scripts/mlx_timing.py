"""Timing helpers shared by the probes in scripts/: how long MLX takes to submit and to
finish evaluating a graph, and chains of dependent ops to time one kind of op by."""

import statistics
import time

import mlx.core as mx


def timed(build, reps, synchronize=True):
    """Median seconds of (submit, total) for evaluating the graph `build()` returns, over
    `reps` runs after one warm-up run. With `synchronize`, the device is idle before each
    timing starts."""
    submits, totals = [], []
    for _ in range(reps + 1):
        y = build()
        if synchronize:
            mx.synchronize()
        start = time.perf_counter()
        mx.async_eval(y)
        submitted = time.perf_counter()
        mx.eval(y)
        done = time.perf_counter()
        submits.append(submitted - start)
        totals.append(done - start)
    return statistics.median(submits[1:]), statistics.median(totals[1:])


def chain(step, start, n):
    """A builder of `n` dependent applications of `step`, starting from `start`."""

    def build():
        y = start
        for _ in range(n):
            y = step(y)
        return y

    return build
