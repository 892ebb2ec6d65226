"""Lineless tables for LORE's logical-location regressor (`lore_process`, twenty-sixth round):
lineless-table-rec 0.0.3 (RapidAI's TableStructureRec; later releases download the models) ships
LORE's two models at opset 9: a DLA-34 CenterNet that finds the cells of a table drawn without
lines (`lore_detect.onnx`), and a transformer that reads each found cell's 256 features and corners
and regresses its logical place: first and last row, first and last column (`lore_process.onnx`).

A table is rendered with Pillow in DejaVu (a header row of words, a first column of words, numbers
elsewhere; 4-7 rows, 3-5 columns, no rules), laid out as the package's preprocess lays a page out
(scaled so its longer side is 768, top-left in a 768 x 768 canvas: its affine transform from the
upper-left corner; zeros elsewhere; its mean and std), run through the shipped detector, and decoded
by the wheel's own DetProcess (lineless_table_process.py, numpy; its one cv2 call, the affine
transform of three points, is solved in numpy here) into `slct_logi_feat` [1, cells, 256] and `dets`
[1, cells, 8] (int64), as LinelessTableRecognition.infer feeds the regressor. One table a sample
(its cell count is the sample's length); tune seed 0, report seed 1000. On 7 x 4 tables the detector
finds the 28 cells and the regressor places them.

Decision (`logical_cells`): each cell's four logical indices, rounded as filter_logi_points rounds
them (a fraction over 0.5 up, else down).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types

import numpy as np

from zoo.sources import seeded

PACKAGE = "lineless-table-rec==0.0.3"
SIDE = 768
MEAN = np.array([0.408, 0.447, 0.470], np.float32)
STD = np.array([0.289, 0.274, 0.278], np.float32)


def _package():
    from zoo.fetch import _pip_package

    return _pip_package(PACKAGE) / "lineless_table_rec"


def _affine(src, dst) -> np.ndarray:
    """cv2.getAffineTransform: the 2 x 3 matrix taking three points to three others."""
    a = np.hstack([np.asarray(src, np.float64), np.ones((3, 1))])
    return np.linalg.solve(a, np.asarray(dst, np.float64)).T


@functools.lru_cache(maxsize=1)
def _processing():
    """The wheel's lineless_table_process module, its cv2 import answered by _affine alone."""
    stub = types.ModuleType("cv2")
    stub.getAffineTransform = _affine
    saved = sys.modules.get("cv2")
    sys.modules["cv2"] = stub
    try:
        spec = importlib.util.spec_from_file_location("zoo_lore_process", _package() / "lineless_table_process.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("cv2", None)
        else:
            sys.modules["cv2"] = saved
    return module


def _table(rng: np.random.Generator):
    from PIL import Image, ImageDraw

    from zoo.images import WORDS, _font

    rows, cols = int(rng.integers(4, 8)), int(rng.integers(3, 6))
    w, h = int(rng.integers(700, 1000)), int(rng.integers(420, 700))
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    font = _font(int(rng.integers(18, 26)))
    widths = rng.uniform(0.7, 1.3, cols)
    lefts = 30 + np.concatenate([[0], np.cumsum(widths)[:-1]]) / widths.sum() * (w - 60)
    for r in range(rows):
        for c in range(cols):
            txt = str(rng.choice(WORDS)) if r == 0 or c == 0 else f"{rng.uniform(0, 999):.1f}"
            d.text((lefts[c], 30 + r * (h - 60) / rows), txt, fill="black", font=font)
    return img


def _page(img) -> tuple[np.ndarray, float]:
    from PIL import Image

    w, h = img.size
    s = float(max(w, h))
    k = SIDE / s
    canvas = np.zeros((SIDE, SIDE, 3), np.float32)
    scaled = np.asarray(img.resize((round(w * k), round(h * k)), Image.BILINEAR), np.float32)
    canvas[:scaled.shape[0], :scaled.shape[1]] = scaled
    return ((canvas / 255 - MEAN) / STD).astype(np.float32).transpose(2, 0, 1)[None], s


def lore_cells(model, seed, n):
    import onnxruntime as ort

    detector = ort.InferenceSession(str(_package() / "models" / "lore_detect.onnx"),
                                    providers=["CPUExecutionProvider"])
    process = _processing()
    rng = seeded(seed)
    feeds = []
    for _ in range(n):
        x, s = _page(_table(rng))
        out = dict(zip(["hm", "st", "wh", "ax", "cr", "reg"], detector.run(None, {"input": x})))
        meta = {"c": np.array([0, 0], np.float32), "s": s, "out_height": SIDE // 4, "out_width": SIDE // 4}
        feat, dets, _ = process.DetProcess()(out, meta)
        feeds.append({"slct_logi_feat": feat.astype(np.float32), "dets": dets.astype(np.int64)})
    return feeds


def logical_cells(outputs, feed):
    """LORE's regressed logical places (its second output, as the package reads it), rounded as
    filter_logi_points rounds them: each cell's first and last row and column."""
    axis = np.asarray(list(outputs.values())[-1])
    floor = np.floor(axis)
    return np.where(axis - floor > 0.5, floor + 1, floor).ravel(), False
