"""Byte-level tests the lossless passes share, with no graph in between (no gs, no onnx): the
merge's fingerprint of a tensor's stored bytes, and half_width's test of float32 values for
exactness in 16 bits. `shrink`'s direct path (api/shrink_direct.py) runs them on a file's
mapping; the passes on gs constants."""

from __future__ import annotations

try:  # hashlib's own blake2b (hashlib.blake2b is this object), without hashlib's import: it loads
    # OpenSSL's libcrypto for its other digests, 3.2-4.8 ms of CPU in every `shrink` and `quant`
    from _blake2 import blake2b
except ImportError:  # a Python built without it: hashlib then has OpenSSL's
    from hashlib import blake2b

SAMPLED_ABOVE = 1 << 16
SAMPLES = 64
SAMPLE_BYTES = 64
BFLOAT16_FROM_OPSET = 13
NOT_EXACT = "values not exact in float16 or bfloat16"
NOT_EXACT_NO_BF16 = f"values not exact in float16 (bfloat16 needs opset {BFLOAT16_FROM_OPSET})"
HOLDS_NAN = "holds NaN (a Cast may not keep its bits)"
HALF_SAMPLE_BYTES = 64 * 1024  # half_type_of's first look
CHUNK_BYTES = 16 * 2**20  # a large weight is checked a slice at a time
FLOAT16, BFLOAT16 = 10, 16  # onnx.TensorProto's


def sampled_digest(read, nbytes: int) -> bytes:
    """The fingerprint of a large tensor, `read(offset)` giving SAMPLE_BYTES of its stored bytes:
    SAMPLES evenly spaced samples, the last SAMPLE_BYTES and the length."""
    step = nbytes // SAMPLES
    h = blake2b(nbytes.to_bytes(8, "little"), digest_size=16)
    for i in range(SAMPLES):
        h.update(read(i * step))
    h.update(read(nbytes - SAMPLE_BYTES))
    return h.digest()


def bytes_digest(data) -> bytes:
    """The fingerprint of a small tensor (at most SAMPLED_ABOVE bytes): all of its bytes."""
    return blake2b(data, digest_size=16).digest()


def exact_so_far(chunk, fp16: bool, bf16: bool) -> tuple[bool | None, bool]:
    """(fp16, bf16) still possible after the float32 values in `chunk`; fp16 None: a NaN."""
    import numpy as np

    bits = np.frombuffer(chunk, dtype="<u4")
    x = bits.view("<f4")
    if np.isnan(x).any():
        return None, False
    # bfloat16 is float32's upper half: exact when the lower 16 bits are zero
    bf16 = bf16 and not (bits & 0xFFFF).any()
    if fp16:
        with np.errstate(over="ignore"):
            back = x.astype(np.float16).astype("<f4")
        fp16 = np.array_equal(back.view("<u4"), bits)
    return fp16, bf16


def half_type_of(first, chunks, nbytes: int, *, bfloat16: bool) -> tuple[int | None, str | None]:
    """(FLOAT16 or BFLOAT16, None) when every float32 value of a tensor of `nbytes` stored bytes
    survives the round trip through that type bit for bit (float16 preferred), else (None, why).
    `first(n)`: its first n bytes; `chunks()`: all its bytes, CHUNK_BYTES at a time. The first
    HALF_SAMPLE_BYTES are looked at first, then the chunks, until both types are ruled out."""
    fp16, bf16 = True, bfloat16
    # a sample first: float32 weights that are not exact in 16 bits show it in their first values,
    # and converting every chunk took 7 of shrink's 15 s on a 1.6 GB model with nothing to store
    head = min(nbytes, HALF_SAMPLE_BYTES) // 4 * 4
    if head and head < nbytes:
        fp16, bf16 = exact_so_far(first(head), fp16, bf16)
        if fp16 is None:
            return None, HOLDS_NAN
    for chunk in chunks() if fp16 or bf16 else ():
        fp16, bf16 = exact_so_far(chunk, fp16, bf16)
        if fp16 is None:
            return None, HOLDS_NAN
        if not (fp16 or bf16):
            break
    if fp16:
        return FLOAT16, None
    if bf16:
        return BFLOAT16, None
    return None, NOT_EXACT if bfloat16 else NOT_EXACT_NO_BF16
