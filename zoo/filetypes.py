"""Inputs for magika's content-type classifier (magika 1.0.3's standard_v3_3: 2048 int32 byte
features in, 214 content types out): real files, featurized as its `_extract_features_from_seekable`
does (at most block_size bytes from each end, stripped of whitespace, the first beg_size and the
last end_size of them, padded with padding_token; all read from the model's config.min.json).

The files are those of three pinned wheels (magika's own, pip 24.0 and setuptools 69.5.1: Python
sources, JSON, PEM certificates, Windows launchers, an ELF executable, an ONNX model, wheel
metadata, templates), taken one extension after another so a batch holds several kinds. The tune
set (seed 0) takes every other file of each extension by path, the report set (seed 1000) the rest,
in path order; any other seed (zoo/draws.py's and bench/fresh_swaps.py's fresh samples) takes the
report half with each extension's files in an order drawn from the seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAGIKA = "magika==1.0.3"
WHEELS = (MAGIKA, "pip==24.0", "setuptools==69.5.1")
BATCH = 8  # files a sample


def _config() -> dict:
    from zoo.fetch import _pip_package

    return json.loads((_pip_package(MAGIKA) / "magika" / "models" / "standard_v3_3" / "config.min.json").read_text())


def features(data: bytes, config: dict) -> np.ndarray:
    """beg + end ints of one file's bytes, as magika 1.0.3 computes them (mid_size is 0)."""
    beg_size, end_size, block, pad = (config[k] for k in ("beg_size", "end_size", "block_size", "padding_token"))
    n = min(block, len(data))
    beg = list(data[:n].lstrip()[:beg_size])
    end_bytes = data[len(data) - n:].rstrip()
    end = list(end_bytes[max(0, len(end_bytes) - end_size):])
    return np.array(beg + [pad] * (beg_size - len(beg)) + [pad] * (end_size - len(end)) + end, np.int32)


def _files(half: int, rng: np.random.Generator | None = None) -> list[Path]:
    """Every other file of each extension (half 0 or 1) of the pinned wheels: `interleaved`."""
    from zoo.fetch import _pip_package

    paths = []
    for spec in WHEELS:
        root = _pip_package(spec)
        paths += [p for p in sorted(root.rglob("*"))
                  if p.is_file() and p.name != ".done" and p.stat().st_size >= 8]  # min_file_size_for_dl
    return interleaved(paths, half, rng)


def interleaved(paths: list[Path], half: int, rng: np.random.Generator | None = None) -> list[Path]:
    """Every other path of each extension (half 0 or 1), in the given order or, with `rng`, in an
    order drawn from it, interleaved across extensions (so a batch holds several kinds)."""
    by_ext: dict[str, list[Path]] = {}
    for p in paths:
        by_ext.setdefault(p.suffix or p.name, []).append(p)
    columns = [files[half::2] for _, files in sorted(by_ext.items())]
    if rng is not None:
        columns = [[c[i] for i in rng.permutation(len(c))] for c in columns]
    out = []
    for i in range(max(len(c) for c in columns)):
        out += [c[i] for c in columns if i < len(c)]
    return out


def file_bytes(model, seed, n):
    """n batches of 8 files each. Decision: each file's content type (argmax of 214)."""
    config = _config()
    files = _files(0 if seed == 0 else 1, None if seed in (0, 1000) else np.random.default_rng(seed))
    if len(files) < n * BATCH:
        raise ValueError(f"{len(files)} files for {n} samples of {BATCH}")
    return [{"bytes": np.stack([features(f.read_bytes(), config) for f in files[i * BATCH:(i + 1) * BATCH]])}
            for i in range(n)]
