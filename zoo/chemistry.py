"""Reactions as chython-rxnmap's four tensors (atom-to-atom mapping, a graph transformer).

The encoding is chython 3.7's `reactions/attention/_encode.py`, ported to numpy so that the zoo
needs no chython (a C-extension package): one token row `[rxn_cls] [mol_cls, atoms...] x each
reactant [mol_cls, atoms...] x each product`, and

    atoms       0 rxn_cls, 1 mol_cls, else atomic number + 2
    neighbors   0 at both cls tokens, else min(heavy degree + implicit H, 14) + 2
    distances   0 padding, 1 between molecules (and mol_cls to its atoms), else min(bonds, 10) + 2
    roles       0 mol_cls, 1 rxn_cls, 2 reactant atom, 3 product atom

The molecules come from reaction SMILES of textbook reactions (amide couplings, Suzuki, SNAr,
reductions, protections...), read by the zoo's small SMILES reader (`smiles.py`): the organic subset, aromatic
atoms, bracket atoms, branches and ring closures (no stereo: the model never sees it).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from zoo.smiles import walk

ELEMENTS = {"H": 1, "B": 5, "C": 6, "N": 7, "O": 8, "F": 9, "Na": 11, "Mg": 12, "P": 15, "S": 16,
            "Cl": 17, "K": 19, "Br": 35, "I": 53}
VALENCES = {"B": (3,), "C": (4,), "N": (3, 5), "O": (2,), "P": (3, 5), "S": (2, 4, 6), "F": (1,),
            "Cl": (1,), "Br": (1,), "I": (1,)}
BOND_ORDERS = {"-": 1, "=": 2, "#": 3, ":": 1}
MAX_DISTANCE, MAX_NEIGHBORS = 10, 14

# reactants>>products; seed 0 (tune) takes them from the front, the report set from the back.
REACTIONS = [
    "CC(=O)O.NCc1ccccc1>>CC(=O)NCc1ccccc1",                                   # amide coupling
    "Brc1ccc(C)cc1.OB(O)c1ccccc1>>Cc1ccc(-c2ccccc2)cc1",                       # Suzuki
    "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C.NCCc1ccccc1>>CC(C)(C)OC(=O)NCCc1ccccc1",    # Boc protection
    "O=[N+]([O-])c1ccc(Cl)cc1>>Nc1ccc(Cl)cc1",                                 # nitro reduction
    "Cc1ccc(S(=O)(=O)Cl)cc1.NC1CCCCC1>>Cc1ccc(S(=O)(=O)NC2CCCCC2)cc1",         # sulfonamide
    "Brc1ccccn1.C1COCCN1>>c1ccc(N2CCOCC2)nc1",                                 # Buchwald-Hartwig
    "OC(=O)c1ccccc1O.CC(=O)OC(C)=O>>CC(=O)Oc1ccccc1C(=O)O",                    # aspirin
    "Fc1ccc([N+](=O)[O-])cc1.C1CCNCC1>>O=[N+]([O-])c1ccc(N2CCCCC2)cc1",        # SNAr
    "CC(=O)O.OCC>>CC(=O)OCC",                                                  # esterification
    "O=Cc1ccccc1.CN>>CNCc1ccccc1",                                             # reductive amination
    "Oc1ccccc1.BrCC>>CCOc1ccccc1",                                             # Williamson ether
    "COC(=O)c1ccc(O)cc1>>O=C(O)c1ccc(O)cc1",                                   # ester hydrolysis
    "CC(=O)c1ccccc1.C[Mg]Br>>CC(C)(O)c1ccccc1",                                # Grignard addition
    "CC(=O)Cl.Nc1ccc(O)cc1>>CC(=O)Nc1ccc(O)cc1",                               # paracetamol
    "CC(C)(C)OC(=O)N1CCC(C(=O)OC)CC1>>COC(=O)C1CCNCC1",                        # Boc removal
    "OCc1ccc(OC)cc1>>O=Cc1ccc(OC)cc1",                                         # alcohol oxidation
    "C=CC=C.C=CC(=O)OC>>COC(=O)C1CC=CCC1",                                     # Diels-Alder
    "C#Cc1ccccc1.[N-]=[N+]=NCc1ccccc1>>c1ccc(Cn2cc(-c3ccccc3)nn2)cc1",         # click
    "COc1ccccc1.CC(=O)Cl>>COc1ccc(C(C)=O)cc1",                                 # Friedel-Crafts
    "Nc1ccccc1.O=C(Cl)c1ccc(F)cc1>>O=C(Nc1ccccc1)c1ccc(F)cc1",                 # Schotten-Baumann
]

def read_smiles(smiles: str) -> list[tuple[list[str], list[int], list[bool], list[tuple[int, int, int]]]]:
    """One molecule per '.'-separated part: (elements, explicit H or -1, aromatic, bonds), a bond's
    order 1 where none is written (aromatic ':' too: chython's encoding reads no order)."""
    molecules = []
    for part in smiles.split("."):
        elements, hydrogens, aromatic, written = walk(part)
        bonds = [(x, y, BOND_ORDERS[w] if w else 1) for x, y, w in written]
        molecules.append((elements, hydrogens, aromatic, bonds))
    return molecules


def _implicit_hydrogens(element, explicit, aromatic, bond_sum):
    if explicit >= 0:
        return explicit
    if aromatic and element in ("O", "S"):
        return 0
    used = bond_sum + (1 if aromatic else 0)
    for valence in VALENCES.get(element, (0,)):
        if valence >= used:
            return valence - used
    return 0


def encode_molecule(molecule):
    """(atoms, neighbors, distances) of one molecule, its mol_cls token first."""
    elements, explicit, aromatic, bonds = molecule
    n = len(elements)
    adjacency = [[] for _ in range(n)]
    bond_sum = [0] * n
    for a, b, order in bonds:
        adjacency[a].append(b)
        adjacency[b].append(a)
        bond_sum[a] += order
        bond_sum[b] += order
    atoms = np.empty(n + 1, np.int64)
    atoms[0] = 1
    neighbors = np.zeros(n + 1, np.int64)
    for i, element in enumerate(elements):
        atoms[i + 1] = ELEMENTS[element] + 2
        hydrogens = _implicit_hydrogens(element, explicit[i], aromatic[i], bond_sum[i])
        neighbors[i + 1] = min(len(adjacency[i]) + hydrogens, MAX_NEIGHBORS) + 2
    distances = np.ones((n + 1, n + 1), np.int64)
    for start in range(n):  # breadth-first: bond counts within the molecule
        seen = {start: 0}
        queue = deque([start])
        while queue:
            atom = queue.popleft()
            for other in adjacency[atom]:
                if other not in seen:
                    seen[other] = seen[atom] + 1
                    queue.append(other)
        for other, count in seen.items():
            distances[start + 1, other + 1] = min(count, MAX_DISTANCE) + 2
    return atoms, neighbors, distances


def encode_reaction(reaction: str) -> dict[str, np.ndarray]:
    """The model's feed ([1, seq] and [1, seq, seq], int64) for one reaction SMILES."""
    reactants, products = reaction.split(">>")
    atoms, neighbors, roles, blocks = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], [1], []
    for side, role in ((reactants, 2), (products, 3)):
        for molecule in read_smiles(side):
            a, nb, d = encode_molecule(molecule)
            atoms.append(a)
            neighbors.append(nb)
            blocks.append(d)
            roles.extend([0] + [role] * (len(a) - 1))
    atoms, neighbors = np.concatenate(atoms), np.concatenate(neighbors)
    total = len(atoms)
    distances = np.zeros((total, total), np.int64)
    distances[0, 0] = 1
    position = 1
    for block in blocks:
        end = position + len(block)
        distances[position:end, position:end] = block
        position = end
    return {"atoms": atoms[None], "neighbors": neighbors[None], "distances": distances[None],
            "roles": np.array(roles, np.int64)[None]}


def reactions(model, seed, n):
    """Tune: the first n reactions; report: the last n (disjoint while 2n <= 20)."""
    chosen = REACTIONS[:n] if seed == 0 else REACTIONS[-n:]
    return [encode_reaction(r) for r in chosen]
