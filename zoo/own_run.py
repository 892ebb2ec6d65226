"""One run of a model in onnxruntime (a default CPU session) on the first sample of an .npz, in
a fresh process: what running the model itself holds (its activations), which any command that
runs it (verification, compare, --inputs) holds too. zoo/run.py measures this process's peak."""

import sys

import numpy as np
import onnxruntime as ort

model, npz = sys.argv[1], sys.argv[2]
data = np.load(npz)
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
wanted = {i.name for i in session.get_inputs()}
# the first sample: NAME__0 where the file holds several, NAME where it holds one (--inputs' format)
feeds = {k.rsplit("__", 1)[0]: data[k] for k in data.files if k.endswith("__0") and k.rsplit("__", 1)[0] in wanted}
feeds = feeds or {k: data[k] for k in data.files if k in wanted}
session.run(None, feeds)
