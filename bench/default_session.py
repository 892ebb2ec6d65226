"""Run one step of a model in a default onnxruntime CPU session (graph optimizations on,
weights pre-packed: what a user's `InferenceSession(path)` does), on generated inputs.

    python bench/default_session.py MODEL.onnx

bench/streaming.py measures this process's peak anonymous memory: whether a result of a model
larger than memory loads and runs where the original could not (issue 48)."""

from __future__ import annotations

import sys
import time

import onnxruntime as ort

from onnxsurgery.running.feeds import make_inputs


def main(path: str) -> None:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    start = time.perf_counter()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    created = time.perf_counter() - start
    feeds = make_inputs(sess, model=path, length=1)
    start = time.perf_counter()
    outputs = sess.run(None, feeds)
    print(f"session {created:.1f} s, one run {time.perf_counter() - start:.2f} s, "
          f"first output {outputs[0].dtype}{list(outputs[0].shape)}")


if __name__ == "__main__":
    main(sys.argv[1])
