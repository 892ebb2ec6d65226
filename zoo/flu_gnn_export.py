"""areaFluForecast's 40 SpatioTemporalGNN members as one batched network (zoo/flu_gnn.py says how);
the only zoo/flu_* module that imports torch at its top (export time only)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

N_SCORED = 14


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
