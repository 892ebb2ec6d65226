"""Draws of a model's weights within 16-bit rounding (issue 55): invariant 12's second look, and
bench/perturb.py's. A 16-bit variant is one rounding of the shipped float32 weights; where int8
rounding then lands swings the quantized model's error 3-5x with the same plan (PP-OCRv6 rec,
tumor_vgg16), so one variant against the shipped model compares two draws. Here each float32
weight that zoo/variants.py's bf16 moves (initializers and Constant nodes of MIN_ELEMENTS or more)
gets value + u, u uniform within half the 16-bit type's spacing at that value: the size of the
variant's own rounding error, in a random direction, stored as float32 (so nothing else changes).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np

MIN_ELEMENTS = 1024  # zoo/variants.py's bf16: what it stores in 16 bits
# explicit mantissa bits of the 16-bit type whose rounding a draw imitates
MANTISSA_BITS = {"bf16": 7, "fp16": 10}


def jittered(values: np.ndarray, rng: np.random.Generator, mantissa_bits: int) -> np.ndarray:
    """`values` each moved by u uniform in +-half the spacing of a float with `mantissa_bits`
    at that value (bfloat16: 2^-9 to 2^-8 of it; float16: 2^-12 to 2^-11, normal range only)."""
    values = np.asarray(values, np.float32)
    _, exp = np.frexp(values)  # values = f * 2^exp, f in [0.5, 1): the spacing is 2^(exp - 1 - bits)
    half = np.ldexp(np.float32(1), (exp - 2 - mantissa_bits).astype(np.int32)).astype(np.float32)
    u = rng.uniform(-1.0, 1.0, values.shape).astype(np.float32)
    return np.where(values == 0, values, values + u * half).astype(np.float32)


def rounded(values: np.ndarray, rng: np.random.Generator | None, mantissa_bits: int) -> np.ndarray:
    """`values` on the grid of a float with `mantissa_bits`, as float32: to nearest (ties to even,
    what zoo/variants.py's bf16 stores) without `rng`, else stochastically (up with probability
    the fraction of the spacing past the grid point below: unbiased, a random direction)."""
    values = np.asarray(values, np.float32)
    _, exp = np.frexp(values)
    spacing = np.ldexp(np.float64(1), (exp - 1 - mantissa_bits).astype(np.int32))
    steps = values / spacing
    steps = np.round(steps) if rng is None else np.floor(steps + rng.uniform(0.0, 1.0, values.shape))
    return (steps * spacing).astype(np.float32)


KINDS = {"jitter": jittered, "stochastic": rounded, "nearest": lambda v, rng, bits: rounded(v, None, bits)}


def perturbed(src: Path, dest: Path, rng: np.random.Generator, mantissa_bits: int = MANTISSA_BITS["bf16"],
              kind: str = "jitter") -> Path:
    """`src` (one .onnx file, weights inside) with each float32 weight of MIN_ELEMENTS or more
    moved (KINDS: jittered, or rounded to the 16-bit grid stochastically or to nearest) and kept
    float32, written as dest / src.name."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    tensors = list(m.graph.initializer)
    tensors += [a.t for n in m.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for t in tensors:
        if t.data_type != onnx.TensorProto.FLOAT or np.prod(t.dims) < MIN_ELEMENTS:
            continue
        t.CopyFrom(numpy_helper.from_array(KINDS[kind](numpy_helper.to_array(t), rng, mantissa_bits), t.name))
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / src.name
    onnx.save_model(m, str(out))
    return out


def draw_errors(src: Path, work: Path, variant: str, k: int, quantize: Callable[[Path, Path], int],
                judge: Callable[[Path, Path], dict], seed: int = 0) -> list[float | None]:
    """`k` draws of `src`'s weights within `variant`'s rounding, each quantized by
    `quantize(model, out)` (its exit code) and judged by `judge(model, out)` (zoo/run.py's
    evaluate: {"error": ...}) against its own float model: each draw's error, None where refused
    or not judged. Draw i uses seed + i; each draw's files are deleted once judged."""
    errors: list[float | None] = []
    for i in range(k):
        d = work / f"draw{seed + i}"
        p = perturbed(src, d, np.random.default_rng(seed + i), MANTISSA_BITS[variant])
        out = d / "q.onnx"
        rc = quantize(p, out)
        judged = judge(p, out) if rc == 0 and out.exists() else {}
        # written but no float output to measure (labels, strings): not a refusal, an error of NaN
        errors.append(None if "finite" not in judged else
                      judged["error"] if judged.get("error") is not None else float("nan"))
        shutil.rmtree(d)
    return errors
