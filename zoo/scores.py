"""Single digits for mk8dx-table-reader's score recognizer (a Keras CNN + bidirectional RNN with a
CTC head, converted by tf2onnx 1.16 at opset 13: each RNN direction a Loop whose body holds its
weights, [N, 40, 30, 1] in, 7 steps x 11 classes out).

Its ScoreProcessor cuts a score into one binary crop a digit, black on white; its
preprocess_image scales the crop to 40 rows, keeps the aspect, pads (or cuts) it to 30 columns
with white, and divides by 255. Here each digit 0-9 is rendered with Pillow in a DejaVu face,
thresholded at 128 (binary, as its mask is) and cropped with a white margin of 12-16 pixels (the
margin its crops have; a tight crop reads as blank). One sample is a batch of the ten digits in
one face and size. Tune: DejaVu Sans and Sans Mono; report: Sans Oblique and Sans Condensed
(the float model reads 30 of the tune set's 40 digits right, 27 of the report set's: not its game
font, but digits it reads). Decision (decisions.argmax_last): the class of
each of the 7 CTC steps of each digit.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from zoo.images import FONTS
from zoo.sources import seeded

TUNE_FACES = ("DejaVuSans.ttf", "DejaVuSansMono.ttf")
REPORT_FACES = ("DejaVuSans-Oblique.ttf", "DejaVuSansCondensed.ttf")


def _crop(digit: str, face: ImageFont.FreeTypeFont, size: int, margin: int) -> np.ndarray:
    img = Image.new("L", (size * 3, size * 3), 255)
    ImageDraw.Draw(img).text((size, size // 2), digit, font=face, fill=0)
    a = np.where(np.asarray(img) < 128, 0, 255).astype(np.uint8)
    ys, xs = np.nonzero(a == 0)
    return a[ys.min() - margin:ys.max() + 1 + margin, xs.min() - margin:xs.max() + 1 + margin]


def _preprocess(a: np.ndarray) -> np.ndarray:
    """kerasUseModelScores.preprocess_image (Pillow's bilinear resize for cv2's)."""
    h, w = a.shape
    r = np.asarray(Image.fromarray(a).resize((max(int(w * 40 / h), 1), 40), Image.BILINEAR), np.float32) / 255
    out = np.ones((40, 30), np.float32)
    out[:, :min(30, r.shape[1])] = r[:, :30]
    return out


def score_digits(model, seed, n):
    rng = seeded(seed)
    faces = TUNE_FACES if seed == 0 else REPORT_FACES
    feeds = []
    for i in range(n):
        size = int(rng.integers(40, 56))
        face = ImageFont.truetype(str(FONTS / faces[i % len(faces)]), size)
        crops = [_preprocess(_crop(d, face, size, int(rng.integers(12, 17)))) for d in "0123456789"]
        feeds.append({"image": np.stack(crops)[..., None]})
    return feeds
