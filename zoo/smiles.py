"""A small SMILES reader for the zoo's chemistry inputs (rxnmap's reactions in `chemistry.py`,
MiniMol's molecules in `molecules.py`): the organic subset, aromatic atoms, bracket atoms (isotope,
hydrogens and charge read past), branches and ring closures; no stereo (neither model sees it).
Each caller turns the bond symbols written into orders its own way."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\[[^\]]+\]|Br|Cl|%\d\d|[BCNOPSFIbcnops]|[-=#:()]|\d")
_BRACKET = re.compile(r"\[(\d*)([A-Z][a-z]?|[bcnops])[@]*(H\d?)?([+-]+\d*)?\]")


def walk(smiles: str) -> tuple[list[str], list[int], list[bool], list[tuple[int, int, str | None]]]:
    """One molecule (no '.'): (elements, explicit H or -1, aromatic, bonds as (a, b, the bond symbol
    written, or None)). A ring closure's bond takes the symbol at its closing digit, else at its opening."""
    elements, hydrogens, aromatic, bonds = [], [], [], []
    stack, rings, previous, symbol = [], {}, None, None
    for token in _TOKEN.findall(smiles):
        if len(token) == 1 and token in "-=#:":
            symbol = token
        elif token == "(":
            stack.append(previous)
        elif token == ")":
            previous = stack.pop()
        elif token[0] == "%" or token.isdigit():
            if token in rings:
                other, written = rings.pop(token)
                bonds.append((other, previous, symbol or written))
            else:
                rings[token] = (previous, symbol)
            symbol = None
        else:
            bracket = _BRACKET.fullmatch(token)
            element = bracket.group(2) if bracket else token
            hydrogens.append((int(bracket.group(3)[1:] or 1) if bracket.group(3) else 0) if bracket else -1)
            elements.append(element.capitalize() if element.islower() else element)
            aromatic.append(element.islower())
            atom = len(elements) - 1
            if previous is not None:
                bonds.append((previous, atom, symbol))
            previous, symbol = atom, None
    return elements, hydrogens, aromatic, bonds
