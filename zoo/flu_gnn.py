"""areaFluForecast (PyPI 1.2.0): neighbourhood-scale influenza forecasts; the wheel ships the Boston
transferable graph model (`pretrained/boston/gnn_st_noadapt_h{1..4}.pt`: one file per horizon of 1-4
weeks, each an ensemble of 10 seeds' SpatioTemporalGNN state dicts) and the Boston data it was trained
on (`sample_data/boston`: weekly ILI rates of 14 neighbourhoods 2017-2026, borders to each other and
to 7 anchor nodes, weekly weather). The network: four gated dilated causal Conv1d blocks over each
node's 16 weeks of rates, a Linear with the node's weather, two graph convolutions (Kipf & Welling's
GCNConv over the weighted border/hop/correlation graph, a LayerNorm each), a head, and a learned
blend of last week's level and a seasonal baseline. The zoo's first graph neural net.

Its GCNConv is torch_geometric's, not installed here: `_GCNConv` rebuilds it from its state dict's
names (lin.weight, bias; gcn_norm's symmetric degree normalization, no added self-loops). The export
stacks the 40 members (4 horizons x 10 seeds) as batched weights, as deployed ensembles are: the
first block's Conv reads the shared input ([2880, 2, 2]), the later ones are grouped Convs (groups 40,
[2880, 24, 2]), the Linears batched MatMuls of [40, in, out]. The graph comes in as an edge list
(`edge_index` [2, E] int64, `edge_weight` [E]) and is normalized and summed into a dense adjacency
in the graph (one-hot MatMuls: the TorchScript exporter's ScatterND for index_put
overwrites repeated indices). Checked against the package's own
SpatioTemporalGNN (eval mode: no MC dropout), each member, the ensemble's mean per horizon.

- flu_gnn_boston: `x` [21, 38] (14 areas + 7 anchors; 16 lags of normalized rate and imputed flag,
  6 z-scored weather columns), `edge_index`, `edge_weight`, `anchor` [14] (this week's normalized
  level), `clim` [14, 4] (the seasonal baseline at each horizon) -> `forecast` [14, 4] (normalized)

Inputs (`flu_origins`): the shipped Boston data as the package's build_samples makes it (causal
imputation, normalization, weather z-scores and the harmonic seasonal baseline fitted on weeks before
2023-07-01; correlation edges over the same weeks), one forecast origin a sample: flu-season weeks of
2023-24 (tune, seed 0) and 2024-25 (report, seed 1000). Decision (`flu_direction`): for each area and
horizon, whether the forecast is above this week's level (the rise or fall a health department acts on).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
import types
from pathlib import Path

import numpy as np

PACKAGE = "areafluforecast==1.2.0"
HORIZONS = (1, 2, 3, 4)
LOOKBACK = 16
TRAIN_END = dt.date(2023, 7, 1)
TOLERANCE = 1e-4  # of the forecasts' largest magnitude, the export against the package's module
WEATHER = ["temp_mean_c", "temp_max_c", "temp_min_c", "relative_humidity_mean", "precipitation_sum_mm",
           "wind_speed_max_kmh"]


def _gcn_conv():
    import torch

    class GCNConv(torch.nn.Module):
        """torch_geometric.nn.GCNConv(c, c, add_self_loops=False), from its state dict's names."""

        def __init__(self, in_channels, out_channels, add_self_loops=False):
            super().__init__()
            assert not add_self_loops
            self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
            self.bias = torch.nn.Parameter(torch.zeros(out_channels))

        def forward(self, x, edge_index, edge_weight):
            return normalized_adjacency(edge_index, edge_weight, x.shape[-2]) @ self.lin(x) + self.bias

    return GCNConv


def normalized_adjacency(edge_index, edge_weight, n):
    """gcn_norm: A[dst, src] += d(src)^-1/2 w d(dst)^-1/2, d the weights summed at each target; summed
    through one-hot matrices (the TorchScript exporter writes index_put's accumulate as a ScatterND
    that overwrites repeated indices)."""
    import torch

    nodes = torch.arange(n)
    to_dst = (edge_index[1][:, None] == nodes[None]).to(edge_weight.dtype)  # [E, n]
    to_src = (edge_index[0][:, None] == nodes[None]).to(edge_weight.dtype)
    inv = (edge_weight @ to_dst).pow(-0.5)
    inv = torch.where(torch.isinf(inv), torch.zeros_like(inv), inv)
    norm = (to_src @ inv) * edge_weight * (to_dst @ inv)
    return (to_dst * norm[:, None]).t() @ to_src


def _package_models(package_dir: Path):
    """The package's models.py with torch_geometric.nn stubbed by the rebuilt GCNConv."""
    saved = {k: sys.modules.get(k) for k in ("torch_geometric", "torch_geometric.nn")}
    pyg, nn = types.ModuleType("torch_geometric"), types.ModuleType("torch_geometric.nn")
    nn.GCNConv, pyg.nn = _gcn_conv(), nn
    sys.modules.update({"torch_geometric": pyg, "torch_geometric.nn": nn})
    module = types.ModuleType("zoo_areaflu_models")
    source = package_dir / "areafluforecast" / "models.py"
    exec(compile(source.read_text(), str(source), "exec"), module.__dict__)
    return module, saved


def _members(package_dir: Path, path_in_package: str):
    import torch

    folder = (package_dir / path_in_package).parent
    out = []
    for h in HORIZONS:
        payload = torch.load(folder / f"gnn_st_noadapt_h{h}.pt", map_location="cpu", weights_only=True)
        out.append((payload["config"], payload["member_state_dicts"]))
    return out


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import onnxruntime as ort
    import torch

    from zoo.flu_gnn_export import Ensemble

    members = _members(package_dir, path_in_package)
    ensemble = Ensemble([m for _, ms in members for m in ms], len(HORIZONS)).eval()
    feeds = flu_origins(None, 0, 2, package_dir) + flu_origins(None, 1000, 2, package_dir)
    args = tuple(torch.from_numpy(feeds[0][k]) for k in INPUTS)
    torch.onnx.export(ensemble, args, str(out), input_names=list(INPUTS), output_names=["forecast"],
                      dynamic_axes={"edge_index": {1: "edges"}, "edge_weight": {0: "edges"}}, opset_version=16,
                      dynamo=False)
    module, saved = _package_models(package_dir)
    try:
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        for feed in feeds:
            want = package_forecast(module, members, feed)
            got = session.run(None, feed)[0]
            if np.abs(got - want).max() > TOLERANCE * np.abs(want).max():
                out.unlink()
                raise RuntimeError("the areaFluForecast export does not compute the package's forecasts")
    finally:
        for k, v in saved.items():
            sys.modules.pop(k, None) if v is None else sys.modules.__setitem__(k, v)


INPUTS = ("x", "edge_index", "edge_weight", "anchor", "clim")


def package_forecast(module, members, feed) -> np.ndarray:
    """Each horizon's 10 members through the package's SpatioTemporalGNN (eval), averaged: [14, 4]."""
    import torch

    x = torch.from_numpy(feed["x"])
    relations = [("all", torch.from_numpy(feed["edge_index"]), torch.from_numpy(feed["edge_weight"]))]
    columns = []
    for h, (config, states) in enumerate(members):
        runs = []
        for state in states:
            model = module.SpatioTemporalGNN(
                lookback=LOOKBACK, temporal_channels=2, n_static_feat=6, n_global=0, n_nodes=x.shape[0],
                n_horizons=1, relation_names=["all"], hidden=config["channels"], dropout=config["dropout"],
                dilations=tuple(config["dilations"]), adaptive_dim=0, n_blocks=config["n_blocks"])
            model.load_state_dict(state)
            model.eval()
            with torch.no_grad():
                runs.append(model(x, relations, torch.zeros(0), torch.from_numpy(feed["anchor"]),
                                  torch.from_numpy(feed["clim"][:, h:h + 1]))[:len(feed["anchor"]), 0].numpy())
        columns.append(np.mean(runs, axis=0))
    return np.stack(columns, axis=1)


# ---------------------------------------------------------------- the package's samples, in numpy
def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _city(package_dir: Path):
    folder = package_dir / "areafluforecast" / "sample_data" / "boston"
    rows = _read_csv(folder / "rates.csv")
    areas = [c for c in rows[0] if c != "week"]
    weeks = [dt.date.fromisoformat(r["week"]) for r in rows]
    rates = np.array([[float(r[a]) if r[a] else np.nan for a in areas] for r in rows])
    anchors = json.loads((folder / "city.json").read_text())["anchors"]
    edges = [(r["a"], r["b"]) for r in _read_csv(folder / "edges.csv")]
    weather = {c: np.full(rates.shape, np.nan) for c in WEATHER}
    where = {w: i for i, w in enumerate(weeks)}
    for r in _read_csv(folder / "weather.csv"):
        i = where.get(dt.date.fromisoformat(r["week"]))
        if i is not None and r["area"] in areas:
            for c in WEATHER:
                weather[c][i, areas.index(r["area"])] = float(r[c]) if r[c] else np.nan
    return weeks, areas, rates, anchors, edges, weather


def _ffill(values: np.ndarray, limit: int) -> np.ndarray:
    out = values.copy()
    for j in range(values.shape[1]):
        last, run = np.nan, 0
        for i in range(values.shape[0]):
            if np.isnan(values[i, j]):
                run += 1
                if run <= limit:
                    out[i, j] = last
            else:
                last, run = values[i, j], 0
    return out


def _impute(rates: np.ndarray) -> np.ndarray:
    """impute_causal: carried forward up to 4 weeks, then the expanding median, then 0."""
    filled = _ffill(rates, 4)
    for i in range(rates.shape[0]):
        past = rates[: i + 1]
        with np.errstate(all="ignore"):
            median = np.array([np.median(c[np.isfinite(c)]) if np.isfinite(c).any() else np.nan for c in past.T])
        filled[i] = np.where(np.isnan(filled[i]), median, filled[i])
    return np.nan_to_num(filled, nan=0.0)


def _edges(areas, anchors, edges, rates_before):
    """graphs.build_graph (borders, 2-3 hops at 0.5 ** (d - 1) / 2, pairwise Pearson r > 0.85) and
    Graph.relation_tensors (every W > 0 off the diagonal, a self-loop of 1 each)."""
    from zoo.flu_samples import graph_weights

    names = areas + anchors
    W = graph_weights(names, len(areas), anchors, edges, rates_before)
    src, dst = np.nonzero((W > 0) & ~np.eye(len(names), dtype=bool))
    index = np.concatenate([np.stack([src, dst]), np.tile(np.arange(len(names)), (2, 1))], axis=1)
    weight = np.concatenate([W[src, dst], np.ones(len(names))])
    return index.astype(np.int64), weight.astype(np.float32)


def flu_origins(model, seed, n, package_dir: Path | None = None):
    """One forecast origin a sample: flu-season weeks (Oct-Mar) of 2023-24 (tune) or 2024-25 (report)."""
    from zoo.flu_samples import climatology, origin_features, package_folder

    weeks, areas, rates, anchors, edges, weather = _city(package_dir or package_folder())
    end = next(i for i, w in enumerate(weeks) if w >= TRAIN_END)
    filled, imputed = _impute(rates), np.isnan(rates).astype(np.float32)
    mean, std = np.nanmean(rates[:end], 0), np.nanstd(rates[:end], 0) + 1e-8
    edge_index, edge_weight = _edges(areas, anchors, edges, rates[:end])
    clim = (climatology(weeks, rates, end) - mean) / std
    year = 2023 if seed < 1000 else 2024
    season = [i for i, w in enumerate(weeks) if dt.date(year, 10, 1) <= w <= dt.date(year + 1, 3, 31)
              and i + max(HORIZONS) < len(weeks)]
    picks = [season[(j * len(season)) // n] for j in range(n)]
    return [origin_features(t, (filled - mean) / std, imputed, weather, end, len(anchors), clim,
                            edge_index, edge_weight) for t in picks]


def flu_direction(outputs, feed):
    """Per area and horizon: is the forecast above this week's level?"""
    forecast = np.asarray(next(iter(outputs.values())))
    return (forecast > feed["anchor"][:, None]).ravel().astype(np.int64), False
