"""Where the zoo's task inputs come from, shared by images.py, speech.py and text.py: seeds, a
model's input names, other zoo models (a pipeline's front end) and packages fetched for their
tokenizers and vocabularies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "build" / "zoo" / "packages"


def seeded(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def input_names(model: Path) -> list:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_inputs()


def dependency(name: str) -> Path:
    """Another zoo model that makes this one's inputs (the front end of a pipeline)."""
    from zoo.fetch import fetch
    from zoo.models import BY_NAME

    return fetch(BY_NAME[name])
