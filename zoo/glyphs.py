"""Glyph pairs for CapSpot's Siamese matcher (a Keras VGG tower that tf2onnx wrote once per input,
its 13 convolutions' weights each read by two Convs): click captchas as its ImageMatcher reads them.
The template strip's glyphs (plain, dark on white) and the same glyphs in the target picture
(coloured, outlined, turned, on a photograph), cropped around each glyph, letterboxed to 60 x 60 on
grey (bicubic), RGB / 255, NHWC. A sample is 4 templates against 4 targets (16 pairs, the batch);
the decision is which target each template matches, as match_images picks it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zoo.sources import seeded

if TYPE_CHECKING:
    from PIL import Image

# Pillow (and zoo.images, which needs it) is imported where glyphs are drawn: `make test` imports
# this module for GLYPHS alone, without Pillow (tests/test_zoo_round10.py)

# symbols and letters DejaVu draws; tune and report samples draw from alternate halves
GLYPHS = list("★♠♣♥♦☂☀☎✈♞⚓♫✿☯⌛✂") + list("AKRGQWHBMZ") + list("ΔΣΩΨΦλ")


def _letterbox(img: Image.Image, size: int = 60) -> np.ndarray:
    from PIL import Image

    scale = min(size / img.width, size / img.height)
    img = img.resize((max(1, int(img.width * scale)), max(1, int(img.height * scale))), Image.BICUBIC)
    canvas = Image.new("RGB", (size, size), (128, 128, 128))
    canvas.paste(img, ((size - img.width) // 2, (size - img.height) // 2))
    return np.asarray(canvas, np.float32) / 255


def _glyph(ch: str, size: int, fill, outline, angle: float, background: Image.Image | None) -> Image.Image:
    """One glyph cropped as a detector's box would crop it (a few pixels of margin)."""
    from PIL import Image, ImageDraw

    from zoo.images import _font

    side = int(size * 1.6)
    layer = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    ImageDraw.Draw(layer).text((side / 2, side / 2), ch, font=_font(size, True), fill=fill, anchor="mm",
                               stroke_width=2 if outline else 0, stroke_fill=outline)
    layer = layer.rotate(angle, resample=Image.BICUBIC)
    box = layer.getbbox() or (0, 0, side, side)
    box = (max(0, box[0] - 3), max(0, box[1] - 3), min(side, box[2] + 3), min(side, box[3] + 3))
    base = background.resize((side, side)) if background is not None else Image.new("RGB", (side, side), "white")
    base = base.convert("RGBA")
    base.alpha_composite(layer)
    return base.convert("RGB").crop(box)


def glyph_pairs(model, seed, n):
    from zoo.images import _photo

    rng = seeded(seed)
    pool = GLYPHS[0::2] if seed == 0 else GLYPHS[1::2]
    feeds = []
    for _ in range(n):
        chars = [pool[i] for i in rng.choice(len(pool), 4, replace=False)]
        templates = [_letterbox(_glyph(c, 28, (30, 30, 30), None, 0.0, None)) for c in chars]
        order = rng.permutation(4)
        targets = []
        for i in order:
            colour = tuple(int(v) for v in rng.integers(0, 200, 3))
            targets.append(_letterbox(_glyph(chars[i], int(rng.integers(36, 56)), colour, "white",
                                             float(rng.uniform(-35, 35)), _photo(rng, (90, 90)))))
        feeds.append({"input_1": np.stack([t for t in templates for _ in range(4)]),
                      "input_2": np.stack([targets[j] for _ in range(4) for j in range(4)])})
    return feeds
