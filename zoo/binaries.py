"""Inputs for models that read a program's bytes as an image (malvizv1's malware classifier):
Windows executables, rendered as its scanner renders them (malvizv1/scanner.py, ported here).

The executables are the launchers that pip's and setuptools' wheels ship (distlib's t32/t64/w32/
w64 and setuptools' cli/gui stubs): real PE files any machine can fetch from PyPI, 12 distinct
ones. The tune set takes every other file by name, the report set the rest: no file is in both.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
from PIL import Image

from zoo.images import IMAGENET, _nchw

WHEELS = ("pip==24.0", "setuptools==69.5.1")


def _executables() -> list[bytes]:
    from zoo.fetch import _pip_package  # fetches the wheel once into build/zoo/packages

    found: dict[str, tuple[str, bytes]] = {}
    for spec in WHEELS:
        root = _pip_package(spec)
        for path in sorted(root.rglob("*.exe")):
            data = path.read_bytes()
            if data[:2] == b"MZ":  # a PE file; cli.exe and cli-32.exe are the same bytes: kept once
                found.setdefault(hashlib.sha256(data).hexdigest(), (path.name, data))
    return [data for _, data in sorted(found.values())]


def _bytes_image(data: bytes) -> Image.Image:
    """malvizv1's `pe_file_to_image_dynamic`: the bytes as rows of a power-of-two width just over
    the square root of their count, the remainder dropped."""
    values = np.frombuffer(data, dtype=np.uint8)
    width = 2 ** (int(math.log(int(len(values) ** 0.5), 2)) + 1)
    rows = len(values) // width
    return Image.fromarray(values[: rows * width].reshape(rows, width))


def executables_224(model, seed, n):
    """malvizv1's preprocessing: grayscale bytes image -> RGB, resized to 224 x 224 (Pillow's
    default filter, as its scanner calls it), / 255, ImageNet mean and std, NCHW."""
    files = _executables()[(0 if seed == 0 else 1)::2]
    if len(files) < n:
        raise ValueError(f"{len(files)} executables for {n} samples")
    return [{"input": _nchw(_bytes_image(data).convert("RGB").resize((224, 224)), *IMAGENET)} for data in files[:n]]


