"""Second moments of a weight's inputs, H = sum of x x^T over the rows it meets: the container
GPTQ and the measured choices read (`Moments`, two folds or one, or the rows themselves), the
rows waiting to be multiplied into it (`Waiting`), and GPTQ's rounding checked on held-out
samples (`calibrated_rounding`). calibration.py captures the rows in onnxruntime."""

from __future__ import annotations

import math

import numpy as np

from .gptq import RowSample, inverse_cholesky, output_error, quantize_with_factor
from .rounding import Quantized

_MIN_PRODUCT_ROWS = 256  # rows of a narrow input (K < 256) held for one product (Waiting)


class Moments:
    """H = sum of x x^T over the inputs one weight meets, in two folds: even-numbered and
    odd-numbered calibration samples. `factor` caches GPTQ's factors while `reused` (more
    weights read the same inputs: Q, K and V); otherwise each is freed after its use.

    With one fold and fewer rows than columns (the measured choices on a wide weight), H is
    kept as its rows (`RowSample`): forming it would cost rows x K^2 and each output error
    N x K^2, where the rows cost N x K x rows and nothing to form."""

    def __init__(self, k: int, folds: int = 2):
        self.folds = np.zeros((folds, k, k))
        self.reused = False
        self._factors: dict[str, np.ndarray] = {}
        self._rows: RowSample | None = None

    @staticmethod
    def of_rows(rows: np.ndarray) -> "Moments":
        moments = Moments(0, 1)
        moments.folds = None
        moments._rows = RowSample(rows)
        return moments

    @property
    def total(self) -> np.ndarray | RowSample:
        if self._rows is not None:
            return self._rows
        return self.folds[0] if len(self.folds) == 1 else self.folds[0] + self.folds[1]

    @property
    def has_two_folds(self) -> bool:
        """False with a single sample: nothing is left over to check a fit against."""
        return self.folds is not None and len(self.folds) == 2 and bool(self.folds[1].any())

    def factor(self, which: str) -> np.ndarray:
        """gptq.inverse_cholesky of "total", "even" or "odd"."""
        if which in self._factors:
            return self._factors[which]
        h = self.total if which == "total" else self.folds[("even", "odd").index(which)]
        upper = inverse_cholesky(h)
        if self.reused:
            self._factors[which] = upper
        return upper


def calibrated_rounding(x: np.ndarray, moments: Moments, plain: Quantized,
                        **gptq_options) -> tuple[Quantized, str | None]:
    """GPTQ rounding of `x` from all the samples, unless GPTQ fitted to one fold and measured
    on the other (both ways) does worse than `plain` rounding on the same samples. Then
    `plain`, with the reason. A fit to few samples can move a weight's error into directions
    those samples happened not to reach (a squeeze-excite Conv sees one input row per
    sample): measured, not guessed. With one sample there is nothing to check against."""
    if moments.has_two_folds:
        axes = {k: gptq_options[k] for k in ("channel_axis", "block_axis")}
        fitted = [quantize_with_factor(x, moments.factor(fold), **gptq_options) for fold in ("even", "odd")]
        held_out = (output_error(x, fitted[0], moments.folds[1], **axes)
                    + output_error(x, fitted[1], moments.folds[0], **axes))
        baseline = sum(output_error(x, plain, h, **axes) for h in moments.folds)
        if held_out >= baseline:  # also when both are 0 (a weight rounding represents exactly)
            ratio = f" ({held_out / baseline:.2f}x its output error)" if baseline > 0 else ""
            return plain, f"GPTQ fitted to half the samples did no better on the other half than plain rounding{ratio}"
    return quantize_with_factor(x, moments.factor("total"), **gptq_options), None


class Waiting:
    """Input rows waiting to be added to their H, over several samples: one [rows, K] product
    over many samples is far faster than one per sample (3072 columns, 16 samples of 128 rows:
    3.5 s -> 0.55 s). Each H waits for K rows: every product then costs at least as much as
    adding its K x K float32 result into the float64 H, which a shared 64 MiB limit broke on a
    transformer (48 readings held 2 samples at a time: 256-row products, 33 s of 48). The rows
    held are at most 4 K^2 bytes per fold (half of H's own 8 K^2, counted in the chunk's
    budget: `calibration.Calibration._held`), plus one sample's rows. `as_rows` (a fixed row count per
    weight, the choices) holds every row to the end, and H is formed only where rows >= K
    (else `Moments.of_rows`)."""

    def __init__(self, cache: dict, as_rows: bool = False):
        self.cache = cache
        self.as_rows = as_rows
        self.parts: dict[tuple, list[np.ndarray]] = {}
        self.rows: dict[tuple, int] = {}

    def add(self, reading, fold: int, cols: np.ndarray, scale: float) -> None:
        finite = np.isfinite(cols).all(axis=1)
        if not finite.all():  # a row holding inf or NaN (a 16-bit original overflowing) makes all of H so
            cols = cols[finite]
        if scale != 1.0:  # (c x)^T (c x) = c^2 x^T x: rows sampled from a larger activation count for all
            cols = cols * np.float32(math.sqrt(scale))
        key = (reading, fold)
        self.parts.setdefault(key, []).append(cols)
        self.rows[key] = self.rows.get(key, 0) + len(cols)
        if not self.as_rows and self.rows[key] >= max(reading.k, _MIN_PRODUCT_ROWS):
            self._add(key)

    def flush(self) -> None:
        for key in list(self.parts):
            self._add(key)

    def _add(self, key) -> None:
        reading, fold = key
        parts = self.parts.pop(key)
        self.rows.pop(key)
        cols = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if self.as_rows and len(cols) < reading.k:
            self.cache[reading] = Moments.of_rows(cols)  # its H never formed (its zeros never touched)
            return
        self.cache[reading].folds[fold] += cols.T @ cols  # a float32 product, summed in float64
