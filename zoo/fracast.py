"""fracast (PyPI 0.1.0): Fracast-0, a zero-shot time-series forecaster (85k parameters) whose encoder
runs one shared causal dilated-convolution block at ten dilations (1, 2, ... 512) and whose head
runs another shared block at six, with the float32 weights shipped in the wheel
(fracast/weights/model.safetensors; the package's default loads the int8 copy beside it, which
its manifest dequantizes to float). Exported here with torch's TorchScript exporter (opset 17),
the package's own modules imported from the wheel:

- fracast_forecaster: `context` [B, 2048] (each series min-max normalized as its
  FracastModel._predict_rows does, left-padded with zeros), `observed` [B, 2048] (1.0 where a value
  was seen) -> `quantiles` [B, 48, 9] (quantiles 0.1 ... 0.9 of the next 48 steps, normalized)

Its periodic features and seasonal fill take the periodogram of the context: torch.fft.rfft, which
the TorchScript exporter refuses. `significant_periods` is replaced, for the export only, by the
package's own code with the power spectrum computed by a radix-2 FFT written in real tensor ops
(a bit-reversal Gather and 11 butterfly stages, 2047 twiddles a part: 16 KB of tables, no 2048 x
1025 DFT matrix), and torch.nn.RMSNorm is written out (aten::rms_norm has no ONNX op before opset
23); everything else is the package's code as it runs.

Inputs (`forecast_contexts`): series synthesized for the zoo, each a kind a forecaster meets:
hourly electricity load (a daily and a weekly cycle, a trend, noise), daily temperatures (a yearly
cycle), hourly road traffic (weekday rush hours, quiet weekends), a sunspot-like cycle, a business
metric that stops being recorded, a random walk; some shorter than the context (masked). Four
series a sample, tune seed 0, report seed 1000 (other draws). Decision (`forecast_levels`): the
median forecast of each step in the lower, middle or upper third of its context's range.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

W = 2048
HORIZON = 48


def _rfft_power(x):
    """|rfft(x)|^2 of x [B, N] (N a power of two), as torch.fft.rfft's X * conj(X), in real ops."""
    import torch

    n = int(x.shape[1])  # a size, not a tensor, while torch traces
    bits = n.bit_length() - 1
    rev = torch.tensor([int(format(i, f"0{bits}b")[::-1], 2) for i in range(n)], dtype=torch.long)
    re = x[:, rev]
    im = torch.zeros_like(re)
    m = 2
    while m <= n:
        h = m // 2
        angle = -2.0 * np.pi * np.arange(h) / m
        wr = torch.tensor(np.cos(angle), dtype=torch.float32)
        wi = torch.tensor(np.sin(angle), dtype=torch.float32)
        re, im = re.reshape(-1, n // m, 2, h), im.reshape(-1, n // m, 2, h)
        ar, ai, br, bi = re[:, :, 0], im[:, :, 0], re[:, :, 1], im[:, :, 1]
        tr, ti = br * wr - bi * wi, br * wi + bi * wr
        re = torch.cat([ar + tr, ar - tr], dim=2).reshape(-1, n)
        im = torch.cat([ai + ti, ai - ti], dim=2).reshape(-1, n)
        m *= 2
    re, im = re[:, : n // 2 + 1], im[:, : n // 2 + 1]
    return re * re + im * im


def significant_periods(x, *, min_period=2, max_period=None, top_k=16, significance_alpha=0.05):
    """The package's official_periodogram.significant_periods, line for line, the FFT aside."""
    import math

    import torch
    import torch.nn.functional as F

    length = int(x.shape[1])
    if max_period is None:
        max_period = length // 2
    x_f = x.float()
    x_c = x_f - x_f.mean(dim=1, keepdim=True)
    n_fft = 1 << int(math.ceil(math.log2(max(2, length))))
    assert n_fft == length, "the context is a power of two: no zero padding"
    power = _rfft_power(x_c)[:, 1:]  # skip DC
    n_bins = power.shape[1]
    total = power.sum(dim=1, keepdim=True).clamp(min=1e-12)
    i_norm = power / total
    k_lo = max(0, (n_fft // max_period) - 1)
    k_hi = min(n_bins - 1, max(0, (n_fft // max(2, min_period)) - 1))
    is_local_max = (i_norm[:, 1:-1] > i_norm[:, :-2]) & (i_norm[:, 1:-1] > i_norm[:, 2:])
    is_local_max_padded = F.pad(is_local_max, (1, 1), value=False)
    valid = torch.zeros(n_bins, dtype=torch.bool)
    if k_hi > k_lo:
        valid[k_lo:k_hi + 1] = True
    is_peak = is_local_max_padded & valid.unsqueeze(0)
    neg_inf = torch.full_like(i_norm, float("-inf"))
    scored = torch.where(is_peak, i_norm, neg_inf)
    n_eff = max(2, int(n_bins))
    alpha = max(min(float(significance_alpha), 1.0), 1e-12)
    scored = torch.where(scored >= math.log(n_eff / alpha) / n_eff, scored, neg_inf)
    scores, k_top = scored.topk(k=min(top_k, n_bins), dim=1)
    periods_raw = torch.round(n_fft / (k_top + 1).clamp(min=1).float()).long()
    finite = torch.isfinite(scores)
    periods = torch.where(finite, periods_raw, torch.zeros_like(periods_raw))
    return periods.long(), scores, finite.sum(dim=1).long()


def _load(package_dir: Path):
    """The package's (core, head) with the float32 weights it ships."""
    sys.path.insert(0, str(package_dir))
    try:
        from fracast.inference import load_fracast
    finally:
        sys.path.remove(str(package_dir))
    return load_fracast(package_dir / "fracast" / "weights", weights="fp32")


def _module(package_dir: Path):
    import torch

    core, head = _load(package_dir)

    class Forecaster(torch.nn.Module):
        """FracastModel._predict_rows's torch part: core, then head.forward_horizon."""

        def __init__(self):
            super().__init__()
            self.core, self.head = core, head

        def forward(self, context, observed):
            values = context.unsqueeze(1)
            valid = observed.unsqueeze(1) > 0.5
            hidden = self.core(values, valid, valid.to(torch.float32))
            return self.head.forward_horizon(hidden, last_obs=values[:, 0, -1:], ctx=values[:, 0],
                                             ctx_mask=valid[:, 0])

    return Forecaster().eval()


def _rms_norm(self, x):
    """torch.nn.RMSNorm.forward written out (aten::rms_norm has no ONNX form before opset 23)."""
    import torch

    eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight


def _patched():
    """The package's periodogram, swapped for the one above where its modules call it, and RMSNorm."""
    import fracast._core.periodic.encoder as encoder
    import fracast._core.periodic.seasonal_fill as seasonal_fill
    import torch

    return [(m, "significant_periods", significant_periods) for m in (encoder, seasonal_fill)] + [
        (torch.nn.RMSNorm, "forward", _rms_norm)]


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    model = _module(package_dir)
    saved = [(m, name, getattr(m, name)) for m, name, _ in _patched()]
    try:
        for m, name, fn in _patched():
            setattr(m, name, fn)
        feeds = forecast_contexts(None, 0, 1)[0]
        args = tuple(torch.from_numpy(feeds[k]) for k in ("context", "observed"))
        torch.onnx.export(model, args, str(out), input_names=["context", "observed"], output_names=["quantiles"],
                          dynamic_axes={"context": {0: "batch"}, "observed": {0: "batch"},
                                        "quantiles": {0: "batch"}}, opset_version=17, dynamo=False)
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)
    _check(model, out)


TOLERANCE = 1e-4  # of the quantiles' largest magnitude (measured: 9e-7)


def _check(model, out: Path) -> None:
    """The written file against the package's own module, unpatched (torch.fft.rfft, nn.RMSNorm), on
    the tune and report contexts: a port that picked another period would move whole forecasts."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for seed in (0, 1000):
        for feeds in forecast_contexts(None, seed, 4):
            with torch.no_grad():
                ref = model(*(torch.from_numpy(feeds[k]) for k in ("context", "observed"))).numpy()
            got = session.run(None, feeds)[0]
            if np.abs(got - ref).max() > TOLERANCE * np.abs(ref).max():
                out.unlink()
                raise RuntimeError(f"the export computes {np.abs(got - ref).max():.3g} away from fracast's module")


# ---------------------------------------------------------------- inputs
def _series(kind: str, rng: np.random.RandomState) -> np.ndarray:
    """One series of a kind, as long as its kind is recorded (up to the context's 2048 steps)."""
    t = np.arange(W, dtype=np.float64)
    if kind == "load":  # hourly electricity: daily and weekly cycles, a slow trend
        day = np.sin(2 * np.pi * (t % 24 - 7 - rng.uniform(0, 2)) / 24).clip(-0.3, None)
        week = np.where((t // 24) % 7 >= 5, -0.25, 0.0)
        y = 50 + rng.uniform(10, 30) * (day + week) + rng.uniform(0, 0.01) * t + rng.normal(0, 1.5, W)
    elif kind == "temperature":  # daily, a yearly cycle, weather noise (an AR(1))
        noise = np.zeros(W)
        for i in range(1, W):
            noise[i] = 0.7 * noise[i - 1] + rng.normal(0, 2.0)
        y = rng.uniform(8, 15) + rng.uniform(8, 12) * np.sin(2 * np.pi * (t - rng.uniform(80, 120)) / 365.25) + noise
    elif kind == "traffic":  # hourly vehicles: two rush hours on weekdays, quiet weekends
        hour, weekday = t % 24, (t // 24) % 7 < 5
        rush = np.exp(-((hour - 8) ** 2) / 3) + 0.8 * np.exp(-((hour - 17.5) ** 2) / 4)
        base = 0.15 + 0.35 * np.exp(-((hour - 14) ** 2) / 20)
        y = rng.uniform(300, 800) * (base + np.where(weekday, rush, 0.3 * rush)) + rng.poisson(20, W)
    elif kind == "sunspots":  # monthly, an 11-year cycle of varying height
        period = rng.uniform(125, 140)
        cycle = np.maximum(np.sin(2 * np.pi * t / period - rng.uniform(0, 6)), 0) ** 1.5
        y = cycle * (80 + 60 * np.sin(2 * np.pi * t / (period * 7.3))) + rng.gamma(2, 4, W)
    elif kind == "sales":  # daily sales of a young product: weekly cycle, growth, a short record
        y = (20 + 0.05 * t) * (1 + 0.4 * ((t % 7) >= 5)) + rng.normal(0, 3, W)
        y[: W - rng.randint(300, 900)] = np.nan  # recorded only lately
    else:  # a random walk with drift (no period)
        y = np.cumsum(rng.normal(rng.uniform(-0.05, 0.05), 1.0, W)) + 100
    return y


KINDS = ("load", "temperature", "traffic", "sunspots", "sales", "walk")


def _normalize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FracastModel._predict_rows: min-max per series over what was observed, zeros elsewhere."""
    mask = np.isfinite(rows)
    finite = np.where(mask, rows, np.nan)
    loc = np.nanmin(finite, axis=1, keepdims=True)
    span = np.maximum(np.nanmax(finite, axis=1, keepdims=True) - loc, 1e-5)
    return np.where(mask, (rows - loc) / span, 0.0).astype(np.float32), mask.astype(np.float32)


def forecast_contexts(model, seed, n):
    """n samples of 4 series each (kinds in turn, each sample its own draw)."""
    feeds = []
    for i in range(n):
        rng = np.random.RandomState(seed + i)
        rows = np.stack([_series(KINDS[(4 * i + j) % len(KINDS)], rng) for j in range(4)])
        context, observed = _normalize(rows)
        feeds.append({"context": context, "observed": observed})
    return feeds


def forecast_levels(outputs, feed):
    """Each step's median forecast (quantile 0.5) in the lower, middle or upper third of [0, 1]:
    its context's observed range, as the package normalizes it."""
    q = np.asarray(next(iter(outputs.values())))
    return np.clip(np.floor(q[..., 4] * 3), 0, 2).astype(np.int64).ravel(), False
