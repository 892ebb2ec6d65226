"""khmer-ocr-ocm (PyPI 0.1.0): a Khmer line recognizer, a CRNN (7 Conv + BatchNorm, a 2-layer
bidirectional LSTM of 256, a Linear to 984 classes, CTC) whose trained weights ship in the wheel as a
torch checkpoint (khmer_ocr_ocm/assets/model.pth, 37 MB, its V21: CER 0.013 on its own real lines),
run by the package in torch. Exported here with torch's TorchScript exporter (opset 17), the package's
own CRNN class loaded from the wheel's model.py:

- khmer_ocr_crnn: `image` [B, 1, 48, 512] grey in [-1, 1] -> `logits` [128, B, 984] (time-major, as
  the package's ctc_greedy_decode reads them)

Inputs: zoo/words.py's 16 Khmer sentences rendered as the package's dataset.render_line renders its
training lines (Pillow with raqm shaping, font size 32, padding 12, resized to 512 x 48) in the five
modern Khmer fonts the wheel bundles, preprocessed as its inference.preprocess does. Tune on the first
8 sentences, report on the last 8; a sample is 4 lines of one font. Decision: the CTC argmax at each
of the 128 steps (what the greedy decoder collapses into the text).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

PACKAGE = "khmer-ocr-ocm==0.1.0"
ASSETS = Path("khmer_ocr_ocm") / "assets"


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    src = (package_dir / "khmer_ocr_ocm" / "model.py").read_text(encoding="utf-8")
    mod = types.ModuleType("zoo_khmer_ocr_model")  # the wheel's CRNN, without importing its package
    sys.modules[mod.__name__] = mod
    exec(compile(src, "khmer_ocr_ocm/model.py", "exec"), mod.__dict__)
    ckpt = torch.load(package_dir / path_in_package, map_location="cpu", weights_only=True)
    model = mod.CRNN(img_height=48, num_classes=int(ckpt["num_classes"]))
    model.load_state_dict(ckpt["model_state_dict"])
    model.eval()
    torch.onnx.export(model, (torch.zeros(2, 1, 48, 512),), str(out), input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {1: "batch"}},
                      opset_version=17, dynamo=False)


def _render(text: str, font_path: Path) -> np.ndarray:
    """dataset.render_line (font 32, padding 12, black on white, bilinear to 512 x 48), then
    inference.preprocess (grey, / 255, (x - 0.5) / 0.5)."""
    import unicodedata

    from PIL import Image, ImageDraw, ImageFont

    text = unicodedata.normalize("NFC", text.strip())
    font = ImageFont.truetype(str(font_path), 32)
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (10, 10), "white")).textbbox((0, 0), text, font=font)
    img = Image.new("RGB", (max(right - left + 24, 1), max(bottom - top + 24, 1)), "white")
    ImageDraw.Draw(img).text((12, 12), text, font=font, fill="black")
    img = img.resize((512, 48), Image.BILINEAR).convert("L")
    return (np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5


def khmer_lines(model, seed, n):
    """n batches of 4 rendered lines [4, 1, 48, 512]; sample i is font i % 5, the half's sentences
    4 at a time (tune: sentences 0-7, report: 8-15)."""
    from zoo.words import KHMER, _package

    fonts = sorted((_package(PACKAGE) / ASSETS / "fonts" / "khmer").glob("*.ttf"))
    half = KHMER[:8] if seed < 1000 else KHMER[8:]
    feeds = []
    for i in range(n):
        font = fonts[i % len(fonts)]
        texts = [half[(4 * i + j) % len(half)] for j in range(4)]
        feeds.append({"image": np.stack([_render(t, font) for t in texts])[:, None]})
    return feeds
