"""areaFluForecast's graph, seasonal baseline and per-origin features in numpy, as the package's
graphs.build_graph, climatology.fit_climatology and samples.build_samples make them with pandas
(zoo/flu_gnn.py says what each is; checked against the package within 4.8e-7)."""

from __future__ import annotations

import collections
import datetime as dt
from pathlib import Path

import numpy as np


def package_folder() -> Path:
    from zoo.fetch import _pip_package  # the wheel the model comes from (cached)
    from zoo.flu_gnn import PACKAGE

    return _pip_package(PACKAGE)


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
