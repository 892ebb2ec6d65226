"""Rounding that uses calibration inputs (GPTQ, Frantar et al. 2022), in numpy.

Round to nearest minimises each weight's own error. What matters is the layer's output error
on real inputs, ||dW X||, which depends on how the input features vary together: with
H = sum of x x^T over the calibration inputs, it is trace(dW H dW^T). GPTQ rounds the input
columns of the weight one at a time and moves the error each rounding leaves onto the columns
not yet rounded, weighted by the inverse of H, so that later roundings cancel it where the
inputs are correlated (or share an offset). The result is ordinary integers, scales and zero
points in the layout `rounding.quantize` produces, so the graph lowering is unchanged.

Layout: the weight is viewed as a matrix [rows, columns]: rows along its channel axis (the
consumer's outputs), columns over every other axis with the block axis innermost, so that each
block is a contiguous run of columns. `calibration.py` builds H in that column order.
"""

from __future__ import annotations

import numpy as np

from .rounding import RANGES, Quantized, has_zero_point
from .scales import scale_dtype, scales_for_ranges

DAMPING = 0.01  # of H's mean diagonal, added to its diagonal (the GPTQ paper's default)
LAZY_COLUMNS = 128  # columns rounded between updates of the rest (per block for blocks)


def matrix_order(ndim: int, channel_axis: int, block_axis: int) -> list[int]:
    """Axis order that makes the weight a [channel, other axes..., block axis] array."""
    return [channel_axis] + [a for a in range(ndim) if a not in (channel_axis, block_axis)] + [block_axis]


def quantize_with_factor(
    x: np.ndarray,
    upper: np.ndarray,
    *,
    dtype: str,
    granularity: str,
    channel_axis: int,
    block_axis: int,
    block_size: int | None = None,
    symmetric: bool = False,
    half_scales: bool = False,
) -> Quantized:
    """GPTQ with `upper` = inverse_cholesky(H) (shared by weights that read the same inputs).
    Scales per tensor and per channel come from the weight's ranges; per block, from each
    block's values as they stand when its turn comes."""
    qmin, qmax = RANGES[dtype]
    order = matrix_order(x.ndim, channel_axis, block_axis)
    moved_shape = tuple(x.shape[a] for a in order)
    w = np.transpose(np.asarray(x, np.float64), order).reshape(moved_shape[0], -1)  # may be a view of x
    rows, cols = w.shape
    if upper.shape != (cols, cols):
        raise ValueError(f"H is {upper.shape}, the weight has {cols} input columns")
    blocks = granularity == "block"
    if blocks and x.shape[block_axis] % block_size:
        raise ValueError("blocks must tile the block axis")
    # One storage type for all scales, fixed from the weight's own range before any update.
    ranges = (w.min(), w.max()) if granularity == "tensor" else (w.min(axis=1), w.max(axis=1))  # per row
    stored = scale_dtype(scales_for_ranges(*ranges, qmin, qmax, symmetric)[0], half_scales)
    if not blocks:  # per tensor or per channel: fixed before any update; s, z per row
        scale, zero = scales_for_ranges(*ranges, qmin, qmax, symmetric, stored)
        s, z = np.broadcast_to(scale.astype(np.float64), (rows,)), np.broadcast_to(zero, (rows,))
    block_scales, block_zeros = [], []
    # Worked on transposed, [cols, rows]: each input column is one contiguous run of memory.
    wt = np.array(w.T, order="C", copy=True)
    q = np.empty((cols, rows), np.float64)
    step = block_size if blocks else LAZY_COLUMNS
    for c0 in range(0, cols, step):
        c1 = min(c0 + step, cols)
        if blocks:
            scale, zero = scales_for_ranges(wt[c0:c1].min(axis=0), wt[c0:c1].max(axis=0), qmin, qmax,
                                            symmetric, stored)
            block_scales.append(scale)
            block_zeros.append(zero)
            s, z = scale.astype(np.float64), zero
        carried = np.empty((c1 - c0, rows))
        for j in range(c0, c1):
            qj = np.clip(np.rint(wt[j] / s + z), qmin, qmax)
            q[j] = qj
            err = (wt[j] - (qj - z) * s) / upper[j, j]
            wt[j + 1:c1] -= upper[j, j + 1:c1, None] * err  # within the block, column by column
            carried[j - c0] = err
        wt[c1:] -= upper[c0:c1, c1:].T @ carried  # the rest, once per block
    q = q.T
    inverse = np.argsort(order)
    store = (np.uint8 if qmax < 256 else np.uint16) if qmin >= 0 else np.int8
    q_out = np.transpose(q.reshape(moved_shape), inverse).astype(store)
    if blocks:
        grouped = moved_shape[:-1] + (moved_shape[-1] // block_size,)
        scale = np.transpose(np.stack(block_scales, axis=1).reshape(grouped), inverse)
        zero = np.transpose(np.stack(block_zeros, axis=1).reshape(grouped), inverse)
        axis = block_axis
    else:
        axis = channel_axis if granularity == "channel" else None
    zp = np.asarray(zero).astype(store) if has_zero_point(dtype, symmetric) else None
    return Quantized(np.ascontiguousarray(q_out), np.asarray(scale).copy(order="C"), zp, dtype, granularity, axis,
                     block_size if blocks else None)


def output_error(x: np.ndarray, qt: Quantized, hessian: np.ndarray, *, channel_axis: int, block_axis: int) -> float:
    """trace(dW H dW^T): the squared output error of the quantized weight, summed over the
    inputs behind H."""
    return output_energy(qt.dequantize() - np.asarray(x, np.float32), hessian,
                         channel_axis=channel_axis, block_axis=block_axis)


class RowSample:
    """H given as the input rows behind it, H = X^T X (X: [rows, K] float32). Where rows < K,
    an output error costs N x K x rows instead of N x K^2, and H is never formed."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    def diagonal(self) -> np.ndarray:
        return np.einsum("ij,ij->j", self.rows, self.rows, dtype=np.float64)


def output_energy(w: np.ndarray, hessian: np.ndarray | RowSample, *, channel_axis: int, block_axis: int) -> float:
    """trace(W H W^T): the squared norm of the layer's output, summed over the inputs behind H."""
    d = np.transpose(w, matrix_order(w.ndim, channel_axis, block_axis)).reshape(w.shape[channel_axis], -1)
    if isinstance(hessian, RowSample):
        out = d @ hessian.rows.T
        return float(np.einsum("ij,ij->", out, out, dtype=np.float64))
    product = d @ hessian.astype(np.float32, copy=False)  # float32: 2x faster
    return float(np.einsum("ij,ij->", product, d, dtype=np.float64))


def input_energy(hessian: np.ndarray, shape: tuple[int, ...], *, channel_axis: int, block_axis: int) -> np.ndarray:
    """diag(H) laid out as the weight (its channel axis of size 1): how much of the layer's
    input each weight element multiplies, summed over the inputs behind H."""
    diag = hessian.diagonal() if isinstance(hessian, RowSample) else np.diagonal(hessian)
    return energy_layout(diag, shape, channel_axis=channel_axis, block_axis=block_axis)


def energy_layout(diag: np.ndarray, shape: tuple[int, ...], *, channel_axis: int, block_axis: int) -> np.ndarray:
    """Per input column energies (matrix_order's column order) laid out as the weight."""
    order = matrix_order(len(shape), channel_axis, block_axis)
    diag = np.asarray(diag, np.float32).reshape([1] + [shape[a] for a in order[1:]])
    return np.transpose(diag, np.argsort(order))


def inverse_cholesky(hessian: np.ndarray) -> np.ndarray:
    """Upper triangular U with U^T U = inverse of the damped H: the factor GPTQ's updates use.
    Columns no calibration input reached (zero diagonal) get a unit diagonal: rounded to
    nearest, their error carried nowhere. Damping grows tenfold until H is positive definite.

    With P the reversal of the columns and P H P = L L^T, U = P L^-1 P."""
    h = np.array(hessian[::-1, ::-1], np.float64, order="C")  # one copy, reversed (P H P)
    diag = np.einsum("ii->i", h)  # a view: writes go to h
    dead = diag <= 0
    h[dead, :] = 0
    h[:, dead] = 0
    diag[dead] = 1
    damping = DAMPING * float(diag.mean())
    added = 0.0
    for _ in range(6):
        diag += damping - added  # in place: no K x K identity to allocate
        added = damping
        try:
            inverse = _lower_cholesky_inverse(h)
            del h  # freed before triu allocates the result
            return np.triu(inverse[::-1, ::-1])  # triu: exact zeros below
        except np.linalg.LinAlgError:
            damping *= 10
    raise np.linalg.LinAlgError("the calibration inputs' second moments are not positive definite")


def _lower_cholesky_inverse(h: np.ndarray) -> np.ndarray:
    """L^-1 for H = L L^T, by halves, so that nearly all the work is matrix products: numpy's
    own Cholesky and inverse are slower on large H, and numpy has no triangular inverse.
    For H = [[A, B^T], [B, C]]: L = [[La, 0], [G, Ls]] with G = B La^-T and Ls the factor of
    C - G G^T, and L^-1 = [[La^-1, 0], [-Ls^-1 G La^-1, Ls^-1]]."""
    n = h.shape[0]
    if n <= 256:
        return np.linalg.inv(np.linalg.cholesky(h))
    m = n // 2
    la_inv = _lower_cholesky_inverse(h[:m, :m])
    g = h[m:, :m] @ la_inv.T
    ls_inv = _lower_cholesky_inverse(h[m:, m:] - g @ g.T)
    inverse = np.empty_like(h)
    inverse[:m, :m], inverse[:m, m:], inverse[m:, m:] = la_inv, 0, ls_inv
    inverse[m:, :m] = -(ls_inv @ g) @ la_inv
    return inverse
