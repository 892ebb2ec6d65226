"""tglfnn-ukaea (PyPI 0.3.0): UKAEA's neural-network surrogates of TGLF, the quasilinear model of
turbulent transport in tokamak plasmas. The wheel ships the weights only (numpy .npz, "exported from
the ONNX models by scripts/onnx_to_npz.py") and, beside them, reference inputs with the original ONNX
models' outputs. For each of three fluxes (electron and ion heat, ion particle flux, in gyro-Bohm
units) a deep ensemble of 5 MLPs (13 inputs, 5 hidden layers of 512, ReLU) predicts a mean and a
softplus variance; the ensemble's mean and variance are the mixture's. 63 MB of weights.

Exported here with torch's TorchScript exporter at opset 11, as torch 1.x exported by default (the
zoo's first model written at an old opset by torch): the five members of an ensemble run as one
batched MatMul, so each layer's weight is a [5, in, out] initializer (a 3-D MatMul weight):

- tglf_multimachine: `input` [B, 13] (RLNS_1 ... VEXB_SHEAR, the package's input_labels) ->
  `efe_gb`, `efi_gb`, `pfi_gb` [B, 2] (mean, variance), as the reference file lays them out

Inputs (`tglf_reference_rows`): the 64 reference rows the wheel ships (plasma parameters of its
multi-machine space), 8 a sample; tune on the first 32, report on the last 32. The export computes the
shipped reference means within 1e-4 relative. Decision (`transport_channels`): for each row, which heat
channel carries more (electron or ion) and the particle flux's direction (outward or inward), the
quantities a transport solver's profile evolution turns on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MACHINE = "multimachine"
OUTPUTS = ("efe_gb", "efi_gb", "pfi_gb")


def _arrays(package_dir: Path, path_in_package: str) -> dict[str, np.ndarray]:
    with np.load(package_dir / path_in_package, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _module(w: dict[str, np.ndarray]):
    import torch

    class Ensemble(torch.nn.Module):
        """One flux: normalize, 5 MLPs as one batched MatMul chain, the mixture's mean and variance."""

        def __init__(self, i: int, name: str):
            super().__init__()
            self.register_buffer("mean", torch.tensor(w["input_mean"][i], dtype=torch.float32))
            self.register_buffer("std", torch.tensor(w["input_std"][i], dtype=torch.float32))
            self.out_mean, self.out_std = float(w["output_mean"][i]), float(w["output_std"][i])
            self.eps = float(w["variance_epsilon"][i])
            layers = int(w["num_layers"][i])
            self.weights = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.tensor(w[f"{name}/layer_{k}/weight"]).transpose(1, 2).contiguous())
                 for k in range(layers)])
            self.biases = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.tensor(w[f"{name}/layer_{k}/bias"]).unsqueeze(1)) for k in range(layers)])

        def forward(self, x):
            h = ((x - self.mean) / self.std).unsqueeze(0)  # [1, B, in], broadcast over the members
            for k, (weight, bias) in enumerate(zip(self.weights, self.biases)):
                h = torch.matmul(h, weight) + bias  # [5, B, out]
                if k < len(self.weights) - 1:
                    h = torch.relu(h)
            mu, var = h[..., 0], torch.nn.functional.softplus(h[..., 1]) + self.eps
            mean = mu.mean(0)
            variance = (var + mu * mu).mean(0) - mean * mean
            return torch.stack([mean * self.out_std + self.out_mean, variance * self.out_std ** 2], dim=-1)

    class Surrogate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = torch.nn.ModuleList([Ensemble(i, str(n)) for i, n in enumerate(w["output_labels"])])

        def forward(self, x):
            return tuple(head(x) for head in self.heads)

    return Surrogate().eval()


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    w = _arrays(package_dir, path_in_package)
    assert tuple(str(n) for n in w["output_labels"]) == OUTPUTS and str(w["activation"]) == "relu"
    x = torch.zeros(2, len(w["input_labels"]))
    torch.onnx.export(_module(w), (x,), str(out), input_names=["input"], output_names=list(OUTPUTS),
                      dynamic_axes={"input": {0: "rows"}, **{o: {0: "rows"} for o in OUTPUTS}},
                      opset_version=11, dynamo=False)
    _check(package_dir, out)


def _check(package_dir: Path, out: Path) -> None:
    """The written file's means against the original ONNX models' outputs the wheel ships on its
    reference rows (their variances differ by float32 cancellation where they are tiny: not checked)."""
    import onnxruntime as ort

    ref = _arrays(package_dir, f"tglfnn_ukaea/reference/{MACHINE}/3.2.1.npz")
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"input": ref["inputs"].astype(np.float32)})
    for name, values in zip(OUTPUTS, got):
        if np.abs(values[:, 0] - ref[name][:, 0]).max() > 1e-5 * np.abs(ref[name][:, 0]).max():
            out.unlink()
            raise RuntimeError(f"the export's {name} means are not the shipped reference's")


def _reference(version: str = "3.2.1") -> dict[str, np.ndarray]:
    from zoo.words import _package

    return _arrays(_package("tglfnn-ukaea==0.3.0"), f"tglfnn_ukaea/reference/{MACHINE}/{version}.npz")


def tglf_reference_rows(model, seed, n, rows: int = 8):
    """The wheel's reference inputs, 8 rows a sample: the first 32 rows (seed 0), the last 32 (seed 1000);
    another seed (a fresh set) draws rows from all 64."""
    x = _reference()["inputs"].astype(np.float32)
    if seed == 0:
        pool = x[:32]
    elif seed == 1000:
        pool = x[32:]
    else:
        pool = x[np.random.RandomState(seed).permutation(len(x))]
    return [{"input": pool[(i * rows) % len(pool):][:rows]} for i in range(n)]


def transport_channels(outputs, feed):
    """Per row: electron heat flux above the ion's, and the particle flux outward (> 0)."""
    efe, efi, pfi = (np.asarray(outputs[k])[:, 0] for k in OUTPUTS)
    return np.concatenate([efe > efi, pfi > 0]).astype(np.int64), False
