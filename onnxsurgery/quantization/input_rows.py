"""What a weight's readers multiply it by, as rows: who reads a weight and in which graph (the
main graph or a branch of a main-graph If: `readers`, `reading_graphs`), and the rows of input
columns each reader meets (`input_columns`; a Conv's input unfolded into kernel-sized windows in
gptq's column order), all of them or a fixed pseudo-random subset of a large activation
(`sampled_columns`). calibration.py sums them into each weight's second moments."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from ..graph_utils import ConstantSite, consumers, readers_by_graph
from .axes import axes_read

_PATCH_BYTES = 64 << 20  # unfolded Conv inputs are processed in slices of about this size


Branch = tuple  # (the If's first output, "then_branch" | "else_branch")


def reading_graphs(site: ConstantSite) -> dict[int, Branch | None] | None:
    """For each graph that reads `site` (by id): None for the main graph, the If branch for a
    branch of a main-graph If; None overall when a reader lives anywhere else (a Loop/Scan
    body, an If nested deeper), whose values are not measured."""
    root = site.scope
    while root.parent is not None:
        root = root.parent
    main = root.graph
    branches = {id(node.attrs[b]): (node.outputs[0].name, b) for node in main.nodes if node.op == "If" and node.outputs
                for b in ("then_branch", "else_branch") if isinstance(node.attrs.get(b), gs.Graph)}
    where: dict[int, Branch | None] = {}
    for graph, _ in readers_by_graph(site):
        if graph is main:
            where[id(graph)] = None
        elif id(graph) in branches:
            where[id(graph)] = branches[id(graph)]
        else:
            return None
    return where


@dataclass(frozen=True)
class Reader:
    """One consumer reading a weight: its data input and how it multiplies the weight."""

    activation: str
    op: str  # MatMul | Gemm | Conv
    attrs: dict
    branch: Branch | None = None  # the If branch holding the consumer, None in the main graph
    node: str = ""  # the consumer's name


def readers(site: ConstantSite) -> list[Reader] | None:
    """How each consumer multiplies `site`, or None when one of them is not supported."""
    where = reading_graphs(site)
    if not site.value.outputs or where is None:
        return None
    graph_of = {id(node): id(graph) for graph, found in readers_by_graph(site) for node, _ in found}
    rank = len(site.shape)
    found = []
    for node, idx in consumers(site):
        data = node.inputs[0]
        ok = idx == 1 and data is not site.value and not hasattr(data, "values") and (
            (node.op == "MatMul" and rank == 2)
            or (node.op == "Gemm" and rank == 2 and not node.attrs.get("transA", 0))
            or (node.op == "Conv" and rank >= 3 and node.attrs.get("group", 1) == 1
                and node.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")))
        if not ok:
            return None
        found.append(Reader(data.name, node.op, dict(node.attrs), where[graph_of[id(node)]], node.name))
    if len(axes_read(site)) > 1:  # readers disagree on the layout
        return None
    return found


def input_columns(x: np.ndarray, reader: Reader, weight_shape: tuple[int, ...]):
    """The rows the weight's input columns meet, as [rows, K] float32 slices (a generator)."""
    return sampled_columns(x, reader, weight_shape)[1]


def sampled_columns(x: np.ndarray, reader: Reader, weight_shape: tuple[int, ...], max_rows: int | None = None):
    """(total rows / rows read, [rows, K] float32 slices): every row, or with `max_rows` a fixed
    pseudo-random subset of about that many (a Conv's: as many output positions per sample)."""
    x = np.asarray(x, np.float32)
    if reader.op != "Conv":
        k = weight_shape[1] if reader.op == "Gemm" and reader.attrs.get("transB", 0) else weight_shape[0]
        rows = x.reshape(-1, k)
        if max_rows is None or rows.shape[0] <= max_rows:
            return 1.0, iter([rows])
        return rows.shape[0] / max_rows, iter([rows[_subset(rows.shape[0], max_rows)]])
    geometry = _Geometry.of(x.shape, reader, weight_shape)
    width = x.shape[1] * math.prod(weight_shape[2:])
    n, out = x.shape[0], geometry.out
    positions = math.prod(out)
    if max_rows is not None and n * positions > max_rows:
        per_sample = max(1, -(-max_rows // n))
        chosen = _subset(positions, per_sample)
        return positions / chosen.size, _positions(x, geometry, np.unravel_index(chosen, out), width)
    patches, r = _patches(x, reader, weight_shape)  # [N, *out, *kernel, C]: a view, nothing copied
    per_row = max(1, math.prod(patches.shape[2:1 + r]) * width * 4)  # bytes per step of the first out axis
    step = max(1, _PATCH_BYTES // per_row)
    return 1.0, (patches[i, o:o + step].reshape(-1, width) for i in range(n) for o in range(0, out[0], step))


@dataclass(frozen=True)
class _Geometry:
    """A Conv's windows over its input: kernel, pads (begin, end per spatial axis), strides,
    dilations, and the output positions along each spatial axis."""

    kernel: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    out: tuple[int, ...]

    @staticmethod
    def of(x_shape: tuple[int, ...], reader: Reader, weight_shape: tuple[int, ...]) -> "_Geometry":
        kernel = tuple(weight_shape[2:])
        r = len(kernel)
        pads = (0,) * 2 * r  # VALID
        if reader.attrs.get("auto_pad", "NOTSET") == "NOTSET":
            pads = tuple(reader.attrs.get("pads", pads))
        strides = tuple(reader.attrs.get("strides", (1,) * r))
        dilations = tuple(reader.attrs.get("dilations", (1,) * r))
        span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        out = tuple((x_shape[2 + i] + pads[i] + pads[i + r] - span[i]) // strides[i] + 1 for i in range(r))
        return _Geometry(kernel, pads, strides, dilations, out)


def _patches(x: np.ndarray, reader: Reader, weight_shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """A Conv's input unfolded into kernel-sized windows, [N, *out, *kernel, C] (gptq's column
    order on the last axes), as a strided view of the padded input; and the spatial rank."""
    g = _Geometry.of(x.shape, reader, weight_shape)
    r = len(g.kernel)
    x = np.pad(x, [(0, 0), (0, 0)] + [(g.pads[i], g.pads[i + r]) for i in range(r)])
    span = [(k - 1) * d + 1 for k, d in zip(g.kernel, g.dilations)]
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + r)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in g.strides)
              + tuple(slice(None, None, d) for d in g.dilations)]  # [N, C, *out, *kernel]
    return win.transpose([0] + list(range(2, 2 + 2 * r)) + [1]), r


def _positions(x: np.ndarray, g: _Geometry, coords: tuple[np.ndarray, ...], width: int):
    """The windows at `coords` (output positions) of every sample, in slices of _PATCH_BYTES:
    gathered from the input itself, the padding's zeros put where a window reaches past it,
    rather than from a padded copy of the whole input (_patches: the same rows, one copy of
    the activation per reader and sample fewer)."""
    step = max(1, _PATCH_BYTES // (width * 4))
    r = len(g.kernel)
    slices = []
    for o in range(0, coords[0].size, step):
        index, inside = [], np.ones((1,) * (1 + r), bool)
        for d in range(r):  # [positions, *kernel] input coordinates along spatial axis d
            kernel = [g.kernel[d] if e == d else 1 for e in range(r)]
            at = (coords[d][o:o + step] * g.strides[d] - g.pads[d]).reshape([-1] + [1] * r) \
                + (np.arange(g.kernel[d]) * g.dilations[d]).reshape([1] + kernel)
            inside = inside & (at >= 0) & (at < x.shape[2 + d])
            index.append(np.clip(at, 0, x.shape[2 + d] - 1))
        slices.append((tuple(index), None if inside.all() else inside))
    for i in range(x.shape[0]):
        for index, inside in slices:
            windows = x[i][(slice(None), *index)]  # [C, positions, *kernel]
            if inside is not None:
                windows = np.where(inside, windows, np.float32(0))
            yield np.moveaxis(windows, 0, -1).reshape(-1, width)


def _subset(total: int, count: int) -> np.ndarray:
    """`count` of range(total), sorted, the same every run (seeded by the sizes)."""
    return np.sort(np.random.default_rng([total, count]).choice(total, count, replace=False))
