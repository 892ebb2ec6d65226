"""Export a transformers model built from a config (random weights, no download) with torch.

Writes a BERT-base-sized sequence classifier (`bert_classifier.onnx`, 12 layers, hidden 768,
~440 MB) or a smaller one with --layers/--hidden. Needs torch and transformers
(`pip install torch==2.13.0 transformers`); used by the quant benchmark when they are there.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("build/samples"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    args = ap.parse_args()
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    path = args.out / "bert_classifier.onnx"
    if path.exists():
        print(f"{path}: up to date")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=args.layers, hidden_size=args.hidden,
                        num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden,
                        num_labels=10)
    model = BertForSequenceClassification(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 64))
    mask = torch.ones_like(ids)
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
