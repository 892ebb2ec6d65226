"""What a model costs per inference: the median wall time of onnxruntime CPU runs on one task
sample, one intra-op thread (what varies least on a shared machine), after a warm-up run.
Runs until `budget` seconds are spent, at least 3 and at most 25 times: a 1024x1024 U-Net
gets its 3 runs, a small classifier its 25. The zoo compares a result's latency with its
original's, measured the same way just before, so the ratio holds where the machine is busy."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def latency(path: Path, feed: dict[str, np.ndarray], budget: float = 2.0) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # a paddle model's shape warnings, once a run, would fill the log
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in s.get_inputs()}
    feed = {k: v for k, v in feed.items() if k in wanted}
    s.run(None, feed)
    times, start = [], time.perf_counter()
    while len(times) < 3 or (len(times) < 25 and time.perf_counter() - start < budget):
        t = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def alternated(original: Path, result: Path, feed: dict[str, np.ndarray], rounds: int = 3) -> tuple[float, float]:
    """Both latencies again, alternating (original, result) `rounds` times: the medians. The
    original's first timing came minutes before the result's; on a shared machine the load between
    them moved one model's median 10x (khmersm's 2.2 ms original, then 14.1 ms for its result
    under a load of 18; alternated: 1.09x)."""
    pairs = [(latency(original, feed), latency(result, feed)) for _ in range(rounds)]
    return float(np.median([p[0] for p in pairs])), float(np.median([p[1] for p in pairs]))
