# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""ddddocr / PP-OCRv4 rec on several sets of rendered text. usage: ocr.py NAME MODEL QUANT..."""
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from quant import text_image, WORDS
from accuracy import _session
from PIL import Image, ImageDraw, ImageFont
import glob

FONTS = sorted(glob.glob("/usr/share/fonts/truetype/dejavu/*.ttf"))
def other_render(shape, seed):
    """another renderer: DejaVu fonts, sizes, offsets, grey paper, ink levels, noise; words and digits"""
    rng = np.random.default_rng(seed)
    _, _, h, w = shape
    bg = int(rng.integers(170, 256)); ink = int(rng.integers(0, 90))
    img = Image.new("L", (w, h), bg)
    d = ImageDraw.Draw(img)
    font = ImageFont.truetype(FONTS[rng.integers(len(FONTS))], int(h * rng.uniform(0.45, 0.75)))
    text = " ".join(rng.choice(WORDS, 2)) if seed % 2 else "".join(rng.choice(list("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789abcdefhkmnpqrstuvwxyz"), int(rng.integers(4, 8))))
    d.text((int(rng.integers(0, 12)), int(rng.integers(0, max(1, h // 5)))), text, fill=ink, font=font)
    x = np.asarray(img, np.float32) / 255.0
    x = np.clip(x + rng.normal(0, rng.uniform(0, 0.04), x.shape), 0, 1)
    x = np.repeat(x[None, None], 3, axis=1)
    return ((x - 0.5) / 0.5).astype(np.float32)

def sets(name):
    shape = (1, 3, 64, 192) if name == "ddddocr_common" else (1, 3, 48, 320)
    gray = (lambda x: x[:, :1].copy()) if name == "ddddocr_common" else (lambda x: x)
    if name == "ddddocr_common":
        tune = range(8, 16)
    else:
        tune = range(8, 16)
    return {"heldout(0-7)": [gray(text_image(shape, s)) for s in range(8)],
            "tune(8-15)": [gray(text_image(shape, s)) for s in tune],
            "H2(100-107)": [gray(text_image(shape, s)) for s in range(100, 108)],
            "H3(other render)": [gray(other_render(shape, s)) for s in range(300, 316)],
            "H4(other render)": [gray(other_render(shape, s)) for s in range(400, 416)]}

def score(ref, path, S):
    r, q = _session(ref), _session(path)
    iname = r.get_inputs()[0].name
    out = {}
    for k, xs in S.items():
        e, ag = 0.0, []
        for x in xs:
            a = r.run(None, {iname: x})[0]; b = q.run(None, {iname: x})[0]
            e = max(e, float(np.linalg.norm(b - a) / np.linalg.norm(a)))
            ag.append(np.mean(a.argmax(-1) == b.argmax(-1)))
        out[k] = (e, float(np.mean(ag)))
    return out

if __name__ == "__main__":
    name, ref = sys.argv[1], sys.argv[2]
    S = sets(name)
    for p in sys.argv[3:]:
        s = score(ref, p, S)
        print(f"{Path(p).name:45s} {Path(p).stat().st_size/1e6:6.2f}MB " + " ".join(f"{k}={v[0]:.4f}/{v[1]:.3f}" for k, v in s.items()), flush=True)
