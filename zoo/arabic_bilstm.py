"""arabic-diacritizer (PyPI 1.0.0): an Arabic diacritizer whose model is a character BiLSTM with
Bahdanau attention (an Embedding of 128, a 3-layer bidirectional LSTM of 256, additive attention
that builds a [B, T, T, 512] tensor, a Linear to 15 diacritic classes), its trained weights shipped
in the wheel as a torch state dict (diacritize/assets/bilstm_best.pt, 18 MB) and run by the package
in torch, one sentence a call (BiLSTMDiacritizer.diacritize; its word cache aside). Exported here
with torch's TorchScript exporter (opset 17), the package's own class imported from the wheel:

- arabic_diacritizer_bilstm: `input_ids` [B, T] int64 -> `logits` [B, T, 15]

Inputs: zoo/tashkeel.py's 16 Arabic sentences (no marks), each encoded as its CharTokenizer encodes
them (add_special=False, as diacritize() calls it), one sentence a sample; tune on the first 8,
report on the last 8. Decision: each character's diacritic class (the argmax).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np

PACKAGE = "arabic-diacritizer==1.0.0"


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    sys.path.insert(0, str(package_dir))  # the wheel's own model class (torch and unicodedata only)
    try:
        from diacritize.baseline.model import BiLSTMDiacritizer
        from diacritize.tokenizer import CharTokenizer
    finally:
        sys.path.remove(str(package_dir))
    model = BiLSTMDiacritizer(vocab_size=CharTokenizer().vocab_size)
    model.load_state_dict(torch.load(package_dir / path_in_package, map_location="cpu", weights_only=True))
    model.eval()
    torch.onnx.export(model, (torch.full((2, 7), 5, dtype=torch.int64),), str(out), input_names=["input_ids"],
                      output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "chars"}, "logits": {0: "batch", 1: "chars"}},
                      opset_version=17, dynamo=False)


def _char_to_id() -> dict[str, int]:
    """CharTokenizer's table from the wheel's tokenizer.py constants (specials 0-3, then its Arabic
    letters, then its punctuation), read without importing it."""
    from zoo.words import _package

    tree = ast.parse((_package(PACKAGE) / "diacritize" / "tokenizer.py").read_text(encoding="utf-8"))
    consts = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name) and t.id in ("ARABIC_LETTERS", "PUNCTUATION")}
    chars = consts["ARABIC_LETTERS"] + consts["PUNCTUATION"]
    return {c: 4 + i for i, c in enumerate(chars)}


def arabic_bilstm_sentences(model, seed, n):
    """One sentence a sample, [1, T] ids (unknown characters: <UNK> = 1)."""
    from zoo.tashkeel import SENTENCES

    table = _char_to_id()
    half = SENTENCES[:8] if seed < 1000 else SENTENCES[8:]
    return [{"input_ids": np.array([[table.get(c, 1) for c in half[i % len(half)]]], np.int64)} for i in range(n)]
