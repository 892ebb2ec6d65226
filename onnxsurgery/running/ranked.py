"""Outputs ranked by a TopK: compared as sets of rows, not row by row.

An end-to-end detector (Ultralytics YOLO26 with end2end, a DETR head) returns its top k
detections [batch, k, fields] in score order. Below the few confident ones, hundreds of rows have
scores within a rounding step of each other, and any change of the weights swaps them: row by
row, isbnx's YOLO26n read a relative L2 of 0.66 and "argmax agreement 63%" for an int8 result
whose rows were the same ones in another order. Such an output is compared after matching each
of the original's rows to its nearest row of the result along the ranked axis (greedily, nearest
pairs first, each row used once): a swap costs nothing, a row that changed or left the top k
costs what it moved.

An output is ranked where a TopK with a constant k lies upstream of it and exactly one of its
axes has k entries (k > 1). Matching is quadratic in k: kept to k <= MAX_ROWS.
"""

from __future__ import annotations

import numpy as np
import onnx

MAX_ROWS = 1024  # k x k distances in float64: 8 MB


def ranked_outputs(model: onnx.ModelProto | None) -> dict[str, int]:
    """Graph output -> the k of a TopK upstream of it (module doc); outputs with none are left out."""
    if model is None:
        return {}
    graph = model.graph
    if not any(node.op_type == "TopK" for node in graph.node):
        return {}  # each output's walk below visits its whole past: a 24-layer decoder's 49 outputs, 0.2-0.4 s
    small = {t.name: t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL and len(t.dims) <= 1}
    for node in graph.node:
        if node.op_type == "Constant":
            small.update((node.output[0], a.t) for a in node.attribute if a.name == "value")
    producer = {name: node for node in graph.node for name in node.output}
    found = {}
    for output in graph.output:
        ks, stack, seen = set(), [output.name], set()
        while stack:
            name = stack.pop()
            node = producer.get(name)
            if node is None or name in seen:
                continue
            seen.add(name)
            if node.op_type == "TopK" and len(node.input) > 1 and node.input[1] in small:
                k = onnx.numpy_helper.to_array(small[node.input[1]]).reshape(-1)
                if k.size == 1 and 1 < int(k[0]) <= MAX_ROWS:
                    ks.add(int(k[0]))
            stack.extend(node.input)
        if len(ks) == 1:
            found[output.name] = ks.pop()
    return found


def ranked_axis(shape: tuple[int, ...], k: int) -> int | None:
    """The one axis of `shape` with k entries, else None."""
    axes = [a for a, n in enumerate(shape) if n == k]
    return axes[0] if len(axes) == 1 else None


def matched(reference: np.ndarray, candidate: np.ndarray, axis: int) -> np.ndarray:
    """`candidate` with its rows along `axis` reordered to match `reference`'s (module doc)."""
    ref = np.moveaxis(reference, axis, -2 if reference.ndim > 1 else -1)
    cand = np.moveaxis(candidate, axis, -2 if candidate.ndim > 1 else -1)
    if ref.ndim == 1:
        ref, cand = ref[:, None], cand[:, None]
    lead, (k, fields) = ref.shape[:-2], ref.shape[-2:]
    flat_ref = ref.reshape(-1, k, fields).astype(np.float64)
    flat_cand = cand.reshape(-1, k, fields).astype(np.float64)
    out = np.empty_like(flat_cand)
    for b in range(flat_ref.shape[0]):
        out[b] = flat_cand[b][_greedy_pairs(flat_ref[b], flat_cand[b])]
    out = out.reshape(*lead, k, fields).astype(candidate.dtype)
    if reference.ndim == 1:
        return out[:, 0]
    return np.moveaxis(out, -2, axis)


def _greedy_pairs(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """For each reference row, the index of the candidate row paired with it: nearest pairs
    first (ties: the lower row, then the lower column), each candidate row once. Rows with NaN
    pair last, in order.

    The greedy walk over all k x k pairs in order, one Python step each, was 0.02-0.05 s a call
    (isbnx_det's 300 rows: its near-equal low-score rows left it most of the 90,000 pairs; 9 calls
    a `quant --inputs`). Taken in rounds instead (issue 58, inputs17): a pair that is the nearest of
    both its row and its column among those left is one the walk takes (nothing before it in the
    order shares its row or column), so each round takes all such pairs at once, in numpy, and the
    next round works on what is left: the same pairs (argmin keeps the first of equal distances,
    as the stable order does). Each round takes at least the nearest pair left."""
    with np.errstate(invalid="ignore", over="ignore"):  # k x k, never k x k x fields (85 of them: 0.7 GB)
        distance = (ref * ref).sum(1)[:, None] + (cand * cand).sum(1)[None, :] - 2 * ref @ cand.T
    distance = np.where(np.isnan(distance), np.inf, distance)
    k = ref.shape[0]
    pair = np.full(k, -1)
    rows, cols = np.arange(k), np.arange(k)
    while rows.size:
        left = distance[np.ix_(rows, cols)]
        nearest_col = left.argmin(1)
        mutual = left.argmin(0)[nearest_col] == np.arange(rows.size)
        pair[rows[mutual]] = cols[nearest_col[mutual]]
        free = np.ones(cols.size, bool)
        free[nearest_col[mutual]] = False
        rows, cols = rows[~mutual], cols[free]
    return pair
