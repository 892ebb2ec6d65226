"""The zoo's memory invariant (invariant 4's memory half, zoo/invariants.py): a command's peak
anonymous memory within docs/memory.md's bound, `baseline + 128 MiB + 8x the largest tensor`, with
the terms that bound adds for 16-bit weights, long list attributes and the commands that run the
model (its own run's activations, --inputs' statistics). The sizes are read from the file without
loading its data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# docs/memory.md: "baseline + 128 MiB + 8x the largest tensor" (tests/test_memory_bounds.py)
SLACK = 128 * 2**20
TIMES_LARGEST = 8
# docs/memory.md, Limits: protobuf parses a list attribute of N bytes into 6.15N (luscinia's 194.5 MB
# of trees: 1197 MB, three fresh processes alike), and the command holds the N bytes it parses from
# while it does: one parsed copy, rounded up
TIMES_LISTS = 8


def memory_bound(baseline: int, largest_tensor: int, float_weights_16bit: int = 0, list_bytes: int = 0) -> int:
    """docs/memory.md's bound; for 16-bit weights docs/memory.md's Limits add onnxruntime's float32
    copies of them (2 bytes more per weight element) during verification, and for a graph whose
    bytes are long list attributes (a tree ensemble's tables: `list_bytes` of them in the file,
    skim.list_attribute_bytes) one parsed copy of them (TIMES_LISTS)."""
    return baseline + SLACK + TIMES_LARGEST * largest_tensor + 2 * float_weights_16bit + TIMES_LISTS * list_bytes


RUNS_NOTHING = ("info", "check", "quant --dry-run --json", "npy")  # hold no session of the model's size
WAITING_ROWS = 64 * 2**20  # docs/memory.md: input rows waiting for one product (calibration._Waiting)


def command_bound(bound: int, command: str, own_run: int, list_bytes: int = 0) -> int:
    """docs/memory.md's bound for `command`: commands that run the model add what onnxruntime holds
    to run it once (`own_run`, measured: its activations), and --inputs the statistics' chunk
    budget and the rows waiting for one product. `npy` loads the model once (its load check,
    sessions.load_error) with the weights mapped: a session of the model's size only where its
    bytes are long list attributes (`list_bytes`, a tree ensemble's tables: luscinia's session
    holds 2.2 GB of them), which nothing can map; that session counts then."""
    if command in RUNS_NOTHING and not (command == "npy" and list_bytes):
        return bound
    bound += own_run
    if "--inputs" in command:
        from onnxsurgery.quantization.calibration import chunk_budget

        bound += chunk_budget() + WAITING_ROWS
    return bound


def within_memory(peak_anon: int, bound: int) -> list[str]:
    if peak_anon > bound:
        return [f"peak anonymous memory {peak_anon / 1e6:.0f} MB > bound {bound / 1e6:.0f} MB (docs/memory.md)"]
    return []


def list_bytes(path: Path) -> int:
    """Bytes of the long list attributes in the model at `path` (a file, or a folder's .onnx) that
    docs/memory.md's bound counts (memory_bound), from the file's wire format without parsing it."""
    from onnxsurgery.storage.skim import list_attribute_bytes

    model_file = path if path.is_file() else next(path.glob("*.onnx"))
    return list_attribute_bytes(model_file)


def largest_tensor_bytes(path: Path) -> tuple[int, int]:
    """(largest initializer in bytes, elements of 16-bit float initializers) without loading data."""
    import onnx

    model_file = path if path.is_file() else next(path.glob("*.onnx"))
    m = onnx.load(str(model_file), load_external_data=False)
    size = {1: 4, 10: 2, 16: 2, 11: 8, 7: 8, 6: 4, 2: 1, 3: 1, 5: 2, 9: 1, 12: 4, 13: 8}
    largest, half = 0, 0
    graphs = [m.graph]
    while graphs:
        g = graphs.pop()
        for t in g.initializer:
            n = int(np.prod(t.dims)) if t.dims else 1
            largest = max(largest, n * size.get(t.data_type, 4))
            if t.data_type in (10, 16):
                half += n
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                elif a.type == onnx.AttributeProto.TENSOR:
                    t = a.t
                    largest = max(largest, (int(np.prod(t.dims)) if t.dims else 1) * size.get(t.data_type, 4))
    return largest, half
