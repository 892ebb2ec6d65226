"""4-bit integers packed two to a byte, as DequantizeLinear's int4/uint4 and the unpacking
chain read them."""

from __future__ import annotations

import numpy as np

from .chunked import share


def pack_nibbles(q: np.ndarray, signed: bool) -> np.ndarray:
    """4-bit values (flattened, C order) packed two per byte, low nibble first, as ONNX stores
    INT4/UINT4. Signed values are stored in two's complement."""
    flat = np.ascontiguousarray(q).reshape(-1)
    if flat.dtype.itemsize != 1:
        flat = flat.astype(np.int16).astype(np.uint8)  # the low byte: the nibble that matters
    flat = flat.view(np.uint8)  # two's complement: the low nibble is the value's
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    # each pair of bytes read as one little-endian uint16 (low nibble's byte in bits 0-7): the
    # packed byte is bits 0-3 and 8-11, by whole-word operations (3.6x the byte-strided ones).
    # Both nibbles masked at once (m = w & 0x0F0F), m | (m >> 4) holds the packed byte in its
    # low byte, written straight into the result by the last operation's cast: three passes
    # over the words where five were (two masks, and a copy out of a uint16 buffer)
    pairs = flat.view("<u2")
    packed = np.empty(pairs.size, np.uint8)
    step = max(1, min(pairs.size, 1 << 18))

    def run(parts: list[slice]) -> None:  # a slice at a time: no full-size temporaries
        low, high = np.empty(step, np.uint16), np.empty(step, np.uint16)
        for part in parts:
            words = pairs[part]
            lo, hi = low[:words.size], high[:words.size]
            np.bitwise_and(words, np.uint16(0x0F0F), out=lo)
            np.right_shift(lo, np.uint16(4), out=hi)
            np.bitwise_or(lo, hi, out=packed[part], casting="unsafe")  # the low byte: both nibbles

    share(run, [slice(start, start + step) for start in range(0, pairs.size, step)], least=4)  # threads (chunked.py)
    return packed


def pack_halves(nibbles: np.ndarray) -> np.ndarray:
    """Values 0..15 two per byte along the last axis (an even length), for the `arith` and
    `gather` lowerings: byte i holds value i in its low nibble and value i + n/2 in its high
    one, so that unpacking is two shifts and a Concat, with no interleaving. A 2-D array is
    packed row by row (rows can then be gathered before unpacking)."""
    x = nibbles.astype(np.uint8, copy=False)  # read only
    if x.shape[-1] % 2:
        raise ValueError("pack_halves needs an even number of values")
    half = x.shape[-1] // 2
    return x[..., :half] | (x[..., half:] << 4)
