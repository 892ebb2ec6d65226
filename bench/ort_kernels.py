"""Issue 58: can the quantize pass's numpy steps run as tiny onnxruntime graphs, bit-identical
and cheaper in CPU? One weight shaped as dec-l4's MLP ([2048, 5632], `scaled` int8: divided by
its input-side scales r, then per column with zero points), each way timed in alternation in
this process (medians of CPU, all threads, and wall), and checked bit for bit against numpy:

- the pass's rounding with its error (chunked.round_to_grid: x / r, / s, + z, rint, the store,
  then ((q - z) * s) * r - x, its max and min and two dot products per slice), against a graph
  Div-Div-Add-Round-Cast that also returns the differences, run a slice at a time with inputs and
  outputs bound to numpy's buffers; the dot products stay numpy's (an onnxruntime
  ReduceSumSquare adds in another order: other bits);
- the rounding alone (no error), against Div-Div-Add-QuantizeLinear (scale 1: QuantizeLinear
  adds a zero point after rounding, numpy before it, which differs where x / s + z lands on a
  half: `--bits` counts those), whole and in slices of 1, 4 and 16 x CHUNK_ELEMENTS;
- the plan's read (chunked.abs_max_with_ranges: row maxima of |x|, then x / r's column ranges)
  against Abs-ReduceMax and Div-ReduceMin-ReduceMax; channel_ranges along axis 0 against
  ReduceMin-ReduceMax.

    python bench/ort_kernels.py [--threads 1] [--repeats 7] [--rows 2048 --cols 5632] [--bits] [--steps]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

from onnxsurgery.quantization import chunked
from onnxsurgery.quantization.lowerings.scaled import EQUALIZE_ALPHA
from onnxsurgery.quantization.rounding import within_grid
from onnxsurgery.quantization.scales import scales_for_ranges
from onnxsurgery.quantization.slice_steps import summed, tile_error

vi = h.make_tensor_value_info


def session(nodes, inputs, outputs, threads: int, inits=()) -> ort.InferenceSession:
    model = h.make_model(h.make_graph(nodes, "kernel", inputs, outputs, list(inits)),
                         opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # spinning threads burn CPU
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def scales_of(row_max: np.ndarray) -> np.ndarray:
    """lowerings.scaled.equalizing_from for a float32 weight."""
    r = row_max.astype(np.float64) ** EQUALIZE_ALPHA
    return np.where((r > 0) & np.isfinite(r), r, 1.0).astype(np.float32)


class Weight:
    """A dec-l4-like weight and the arguments the pass hands round_to_grid for it."""

    def __init__(self, rows: int, cols: int):
        rng = np.random.default_rng(0)
        self.x = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        self.x[rng.integers(0, rows, 8)] *= 6  # a few outlier input rows, as trained weights have
        row_max, lo, hi = chunked.abs_max_with_ranges(self.x, scales_of)
        self.r = scales_of(row_max).reshape(-1, 1)
        scale, zero = scales_for_ranges(lo, hi, -128, 127, symmetric=False, half_scales=False)
        self.s, self.z = scale.astype(np.float32).reshape(1, -1), zero.astype(np.float32).reshape(1, -1)
        self.clipped = not within_grid((lo, hi), self.s, self.z, -128, 127)


def rounding_graphs(threads: int) -> dict[str, ort.InferenceSession]:
    ins = [vi("x", T.FLOAT, ["n", "m"]), vi("r", T.FLOAT, ["n", 1]), vi("s", T.FLOAT, [1, "m"]),
           vi("z", T.FLOAT, [1, "m"])]
    front = [h.make_node("Div", ["x", "r"], ["v"]), h.make_node("Div", ["v", "s"], ["w"]),
             h.make_node("Add", ["w", "z"], ["u"])]
    q = vi("q", T.INT8, ["n", "m"])
    error = [h.make_node("Round", ["u"], ["qf"]), h.make_node("Cast", ["qf"], ["q"], to=T.INT8),
             h.make_node("Sub", ["qf", "z"], ["e1"]), h.make_node("Mul", ["e1", "s"], ["e2"]),
             h.make_node("Mul", ["e2", "r"], ["e3"]), h.make_node("Sub", ["e3", "x"], ["d"])]
    linear = [h.make_node("QuantizeLinear", ["u", "one", "zp"], ["q"])]
    consts = [h.make_tensor("one", T.FLOAT, [], [1.0]), h.make_tensor("zp", T.INT8, [], [0])]
    return {"error": session(front + error, ins, [q, vi("d", T.FLOAT, ["n", "m"])], threads),
            "linear": session(front + linear, ins, [q], threads, consts)}


def ort_rounding(sess: ort.InferenceSession, w: Weight, with_error: bool, slice_times: int | None):
    """q (and round_to_grid's error figures) from `sess`, a slice of rows at a time (of
    slice_times x CHUNK_ELEMENTS) or whole (None). With the error, the slices are round_to_grid's
    (slice_times 1, rows of at most CHUNK_ELEMENTS) and each one's differences land in one
    buffer, in cache for numpy's dot products, as tile_error's."""
    x = w.x
    q = np.empty(x.shape, np.int8)
    step = x.shape[0]
    if slice_times is not None:
        step = next(chunked.row_slices(x.shape, chunked.CHUNK_ELEMENTS * slice_times)).stop
    d = np.empty((step, x.shape[1]), np.float32) if with_error else None
    sums = []
    bind = sess.io_binding()
    bind.bind_cpu_input("s", w.s)
    bind.bind_cpu_input("z", w.z)
    for start in range(0, x.shape[0], step):
        rows = slice(start, min(start + step, x.shape[0]))
        bind.bind_cpu_input("x", x[rows])
        bind.bind_cpu_input("r", w.r[rows])
        shape = (rows.stop - rows.start, x.shape[1])
        bind.bind_output("q", "cpu", 0, np.int8, shape, q[rows].ctypes.data)
        if with_error:
            bind.bind_output("d", "cpu", 0, np.float32, shape, d.ctypes.data)
        sess.run_with_iobinding(bind)
        if with_error:
            f, xf = d[:shape[0]].reshape(-1), x[rows].reshape(-1)
            sums.append((float(np.dot(f, f)), float(np.dot(xf, xf)), max(float(f.max()), -float(f.min()))))
    return q, summed(np.array(sums)) if with_error else None


def hybrid(sess: ort.InferenceSession, w: Weight):
    """onnxruntime's integers a slice at a time (round_to_grid's slices), numpy's error from them
    while the slice is in cache: cast back to float32, then tile_error as round_to_grid runs it."""
    x = w.x
    q = np.empty(x.shape, np.int8)
    step = next(chunked.row_slices(x.shape)).stop
    d = np.empty((step, x.shape[1]), np.float32)
    sums = []
    bind = sess.io_binding()
    bind.bind_cpu_input("s", w.s)
    bind.bind_cpu_input("z", w.z)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, x.shape[0], step):
            rows = slice(start, min(start + step, x.shape[0]))
            bind.bind_cpu_input("x", x[rows])
            bind.bind_cpu_input("r", w.r[rows])
            bind.bind_output("q", "cpu", 0, np.int8, (rows.stop - rows.start, x.shape[1]), q[rows].ctypes.data)
            sess.run_with_iobinding(bind)
            f = d[:rows.stop - rows.start]
            np.copyto(f, q[rows])
            sums.append(tile_error(f, x[rows], w.s, w.z, w.r[rows]))
    return q, summed(np.array(sums))


def range_graphs(threads: int) -> dict[str, ort.InferenceSession]:
    x, r = vi("x", T.FLOAT, ["n", "m"]), vi("r", T.FLOAT, ["n", 1])
    a0, a1 = [h.make_tensor("a0", T.INT64, [1], [0])], [h.make_tensor("a1", T.INT64, [1], [1])]

    def reduce(op: str, x: str, axis: str, y: str):
        return h.make_node(op, [x, axis], [y], keepdims=0)

    return {
        "absmax": session([h.make_node("Abs", ["x"], ["ax"]), reduce("ReduceMax", "ax", "a1", "mx")],
                          [x], [vi("mx", T.FLOAT, ["n"])], threads, a1),
        "columns": session([h.make_node("Div", ["x", "r"], ["v"]), reduce("ReduceMin", "v", "a0", "lo"),
                            reduce("ReduceMax", "v", "a0", "hi")],
                           [x, r], [vi("lo", T.FLOAT, ["m"]), vi("hi", T.FLOAT, ["m"])], threads, a0),
        "rows": session([reduce("ReduceMin", "x", "a1", "lo"), reduce("ReduceMax", "x", "a1", "hi")],
                        [x], [vi("lo", T.FLOAT, ["n"]), vi("hi", T.FLOAT, ["n"])], threads, a1)}


def zero_point_mismatch(threads: int) -> tuple[int, int]:
    """Elements where QuantizeLinear with int8 zero points (rint(x / s) + z) differs from numpy's
    rint(x / s + z), on values near halves: (differing, all)."""
    rng = np.random.default_rng(1)
    x = (rng.integers(-100, 100, (4096, 64)) + 0.5 - rng.uniform(0, 1e-5, (4096, 64))).astype(np.float32)
    z = rng.integers(-27, 28, 64).astype(np.int8)
    s = np.ones(64, np.float32)
    sess = session([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1)],
                   [vi("x", T.FLOAT, ["n", 64]), vi("s", T.FLOAT, [64]), vi("z", T.INT8, [64])],
                   [vi("q", T.INT8, ["n", 64])], threads)
    ours = np.clip(np.rint(x / s + z.astype(np.float32)), -128, 127).astype(np.int8)
    return int((sess.run(None, {"x": x, "s": s, "z": z})[0] != ours).sum()), x.size


def steps(threads: int) -> None:
    """Each step alone on one slice in cache ([11, 5632], CHUNK_ELEMENTS floats): numpy's ufunc
    into a buffer against a one-node graph bound to the same buffers, 200 calls, 9 alternations."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((11, 5632)).astype(np.float32)
    s, r = rng.uniform(0.5, 1, (1, 5632)).astype(np.float32), rng.uniform(0.5, 1, (11, 1)).astype(np.float32)
    out, q = np.empty_like(x), np.empty(x.shape, np.int8)

    def bound(op: str, b: np.ndarray | None, y: np.ndarray, **attrs):
        ins = [vi("a", T.FLOAT, list(x.shape))] + ([vi("b", T.FLOAT, list(b.shape))] if b is not None else [])
        out_type = T.INT8 if y.dtype == np.int8 else T.FLOAT
        sess = session([h.make_node(op, [i.name for i in ins], ["y"], **attrs)], ins,
                       [vi("y", out_type, list(x.shape))], threads)
        bind = sess.io_binding()
        bind.bind_cpu_input("a", x)
        if b is not None:
            bind.bind_cpu_input("b", b)
        bind.bind_output("y", "cpu", 0, y.dtype, y.shape, y.ctypes.data)
        return lambda: sess.run_with_iobinding(bind)

    cases = {"divide by a row of scales": (lambda: np.divide(x, s, out=out), bound("Div", s, out)),
             "divide by a column of divisors": (lambda: np.divide(x, r, out=out), bound("Div", r, out)),
             "rint / Round": (lambda: np.rint(x, out=out), bound("Round", None, out)),
             "store as int8 / Cast": (lambda: np.copyto(q, x, casting="unsafe"), bound("Cast", None, q, to=T.INT8)),
             "nothing / Identity (a run, and a copy)": (lambda: None, bound("Identity", None, out))}
    print("one slice of 64K floats in cache, us per call (CPU):")
    for name, pair in cases.items():
        spent: tuple[list, list] = ([], [])
        for _ in range(9):
            for f, times in zip(pair, spent):
                c = time.process_time()
                for _ in range(200):
                    f()
                times.append((time.process_time() - c) / 200 * 1e6)
        print(f"  {name:40s} numpy {statistics.median(spent[0]):6.1f}  onnxruntime {statistics.median(spent[1]):6.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="numpy's slice threads and onnxruntime's intra-op threads")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=5632)
    ap.add_argument("--bits", action="store_true", help="also count QuantizeLinear's zero-point mismatches")
    ap.add_argument("--steps", action="store_true", help="also time each step alone on one slice")
    args = ap.parse_args()
    chunked._workers = lambda: args.threads  # the slices' pool (parallel.WORKERS otherwise)
    w = Weight(args.rows, args.cols)
    rg, ranges = rounding_graphs(args.threads), range_graphs(args.threads)

    def numpy_rounding(with_error: bool):
        sums = [] if with_error else None
        q = chunked.round_to_grid(w.x, w.s, w.z, -128, 127, np.int8, w.r, sums, clipped=w.clipped)
        return q, tuple(sums) if with_error else None

    def ort_plan_read():
        mx = ranges["absmax"].run(None, {"x": w.x})[0]
        return (mx, *ranges["columns"].run(None, {"x": w.x, "r": scales_of(mx).reshape(-1, 1)}))

    full, bare, read, rows = ("numpy round_to_grid + error", "numpy round_to_grid, no error",
                              "numpy abs_max_with_ranges", "numpy channel_ranges(axis 0)")
    ways = {  # name: (run it, the numpy way whose bits it must match)
        full: (lambda: numpy_rounding(True), None),
        "ort slices Div-Div-Add-Round-Cast + diff": (lambda: ort_rounding(rg["error"], w, True, 1), full),
        "ort slices QuantizeLinear, numpy's error": (lambda: hybrid(rg["linear"], w), full),
        bare: (lambda: numpy_rounding(False), None),
        "ort whole Div-Div-Add-QuantizeLinear": (lambda: ort_rounding(rg["linear"], w, False, None), bare),
        "ort slices x1 QuantizeLinear": (lambda: ort_rounding(rg["linear"], w, False, 1), bare),
        "ort slices x4 QuantizeLinear": (lambda: ort_rounding(rg["linear"], w, False, 4), bare),
        "ort slices x16 QuantizeLinear": (lambda: ort_rounding(rg["linear"], w, False, 16), bare),
        read: (lambda: chunked.abs_max_with_ranges(w.x, scales_of), None),
        "ort Abs-ReduceMax, Div-ReduceMin/Max": (ort_plan_read, read),
        rows: (lambda: chunked.channel_ranges(w.x, 0), None),
        "ort ReduceMin/Max(axis 1)": (lambda: tuple(ranges["rows"].run(None, {"x": w.x})), rows),
    }
    results = {name: f() for name, (f, _) in ways.items()}
    same = {name: all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(results[name], results[ref]))
            for name, (_, ref) in ways.items() if ref}
    cpu: dict = {name: [] for name in ways}
    wall: dict = {name: [] for name in ways}
    for _ in range(args.repeats):  # alternating, so that the load meets every way alike
        for name, (f, _) in ways.items():
            c, t = time.process_time(), time.perf_counter()
            f()
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - t)
    print(f"[{args.rows}, {args.cols}] float32, {args.threads} thread(s), medians of {args.repeats}; "
          f"the clip {'run' if w.clipped else 'skipped (within_grid)'}")
    for name in ways:
        check = "" if name not in same else ("  bits: same" if same[name] else "  bits: DIFFER")
        print(f"  {name:44s} CPU {statistics.median(cpu[name]) * 1e3:7.1f} ms"
              f"  wall {statistics.median(wall[name]) * 1e3:7.1f} ms{check}")
    if args.bits:
        differ, total = zero_point_mismatch(args.threads)
        print(f"QuantizeLinear with zero points against numpy's rint(x / s + z), near halves: "
              f"{differ} of {total} differ")
    if args.steps:
        steps(args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
