"""Task inputs that mean something, per model kind (zoo/models.py `inputs`). Each function is
(model_path, seed, n) -> list of feeds (dict input name -> array); seed 0 makes the tuning set,
seed 1000 the report set (other images, sentences, utterances, rows).

What they are: text and documents rendered with Pillow (DejaVu fonts); photographs from
scikit-learn's bundled sample images (china.jpg, flower.jpg), cropped and scaled; speech
synthesized with espeak-ng (a real formant synthesizer; pitch varied with -p), 16 kHz; real
sentences tokenized with a packaged tokenizer; the held-out half of scikit-learn's bundled
digits / breast-cancer datasets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoo.sources import seeded


# ---------------------------------------------------------------- ml
def _heldout(loader: str) -> np.ndarray:
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    data = getattr(datasets, loader)()
    _, x, _, _ = train_test_split(data.data.astype(np.float32), data.target, test_size=0.5, random_state=0,
                                  stratify=data.target)
    return x

REPORT_ROWS = 200  # the tabular models' n_report (zoo/models.py)


def _rows(loader: str, seed: int, n: int):
    """Tune on the first 64 held-out rows (seed 0), report on the next n (seed 1000); any other
    seed (bench/fresh_samples.py) draws n rows from those past both, so a fresh set is fresh."""
    x = _heldout(loader)
    if seed == 0:
        return [{"input": x[:64]}]
    if seed == 1000:
        return [{"input": x[64:64 + n]}]
    rest = x[64 + REPORT_ROWS:]
    return [{"input": rest[np.sort(seeded(seed).choice(len(rest), min(n, len(rest)), replace=False))]}]

def digits_rows(model, seed, n):
    return _rows("load_digits", seed, n)

def digits_rows_f64(model, seed, n):
    """digits_rows in float64, for a model converted with DoubleTensorType (sk_mlp64_digits)."""
    return [{k: v.astype(np.float64) for k, v in feed.items()} for feed in _rows("load_digits", seed, n)]


def cancer_rows(model, seed, n):
    return _rows("load_breast_cancer", seed, n)

# surfaces' KNeighborsClassifier test function: its search space (n_neighbors every 5 from 3, the
# four algorithms, cv folds, the three datasets), in the order and codes of the model's meta.json
KNN_NEIGHBORS = np.arange(3, 150, 5)
KNN_CV = [2, 3, 4, 5, 8, 10]


def knn_search_grid(model, seed, n):
    """One dataset a sample (digits, iris, wine: codes 0-2): every algorithm x cv x n_neighbors,
    n_neighbors from alternate halves of its range for tune and report (the grid a hyperparameter
    search walks). Decision (decisions.best_per_sweep): the best n_neighbors of each sweep."""
    neighbors = KNN_NEIGHBORS[0::2] if seed == 0 else KNN_NEIGHBORS[1::2]
    return [{"input": np.array([[k, algorithm, cv, dataset] for algorithm in range(4) for cv in KNN_CV
                                for k in neighbors], np.float32)} for dataset in range(min(n, 3))]


def maker(model_row):
    """The (model_path, seed, n) -> feeds function that builds one model's inputs."""
    # Pillow, espeak-ng: only where inputs are built
    from zoo import (annalog, arabic_bilstm, binaries, chemistry, chemnet, denoise, fbank, filetypes, fingerprints,
                     flu_gnn, fracast, g2p_en, glyphs, grammar, hanzi, ieeg, images, indonesian, isbn, khmer_ocr,
                     kokoro, lemmas, lore, microscopy, molecules, music, resemblyzer, sapiens, scores, seals, signals,
                     singing, speech, stress, tashkeel, terrain, text, tglf, thai, titles, transcription, vadweb,
                     vietnamese, vocoder, words)
    from zoo import hotword, salient  # thirty-seventh round (zoo29)

    modules = (images, speech, text, signals, chemistry, binaries, words, titles, fbank, glyphs, lemmas, singing,
               filetypes, hanzi, seals, ieeg, isbn, tashkeel, music, transcription, vietnamese, stress, fingerprints,
               thai, vadweb, molecules, terrain, scores, g2p_en, annalog, kokoro, vocoder, indonesian, khmer_ocr,
               arabic_bilstm, grammar, denoise, fracast, tglf, sapiens, chemnet, microscopy, lore, resemblyzer, flu_gnn,
               salient, hotword)
    return globals().get(model_row.inputs) or next(
        getattr(m, model_row.inputs) for m in modules
        if hasattr(m, model_row.inputs))

def build(model_row, path: Path, which: str) -> list[dict[str, np.ndarray]]:
    """The tune or report set of one model (zoo/models.py row)."""
    seed, n = (0, model_row.n_tune) if which == "tune" else (1000, model_row.n_report)
    return maker(model_row)(path, seed, n)

def save_npz(feeds: list[dict[str, np.ndarray]], path: Path) -> Path:
    """As `quant --inputs` reads them: `name` for one sample, `name__0`, `name__1`, ... for several."""
    arrays = {}
    for i, feed in enumerate(feeds):
        for k, v in feed.items():
            arrays[k if len(feeds) == 1 else f"{k}__{i}"] = v
    np.savez(path, **arrays)
    return path
