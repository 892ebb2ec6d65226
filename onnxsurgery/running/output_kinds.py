"""Whether an output's last axis holds classes, so that argmax agreement means something there.

Argmax agreement is the share of positions where two models pick the same entry of the last
axis: for a classifier's logits, an OCR model's characters or a decoder's vocabulary, whether
the answer changed. Over an embedding model's hidden features it means nothing (issue 49:
`report` showed all-MiniLM-L6-v2's int4 at "argmax agreement 0.0%", an argmax over 384 hidden
units, which no user reads as an answer). The rule, in order:

1. a last axis of one entry has no argmax (a score, a probability of one class);
2. the output's name decides where it says what the output is: words for features (`hidden`,
   `embedding`, `feature`, `pooler`, `state`, `vector`, a cache's `present`/`past`, a
   detector's `boxes` or `regression`, a landmark model's `points`, ...) mean no argmax, words for classes
   (`logits`, `prob`, `score`, `class`, `label`, `softmax`, `pred`, ...) mean one. Exporters
   name outputs after the model's return value (transformers: `logits`, `last_hidden_state`,
   `sentence_embedding`, `pooler_output`; PaddleOCR: `softmax_*`; sklearn-onnx:
   `probabilities`), so the name is the best evidence there is;
3. a name that says neither (`output`, `y`, `output_0`): a 2-D output [batch, C] is a
   classifier's head, argmax kept; from 3-D on, kept unless the last axis is a multiple of 64,
   as a transformer's hidden size is (64 to 8192 in every config we have read), which class
   counts and vocabularies rarely are (1000, 6625, 30522, 50257).

A KV cache's outputs are left out of the headline elsewhere (`kv_cache.is_cache_output`).
"""

from __future__ import annotations

import re

from ..errors import InputError
from .kv_cache import is_cache_output

FEATURE_WORDS = ("hidden", "embedding", "embeddings", "embed", "emb", "feature", "features", "feat", "pooler",
                 "pooled", "state", "states", "vector", "vectors", "encoding", "encodings", "representation",
                 "present", "past", "cache", "kv", "boxes", "bbox", "bboxes",
                 # a detector's or a landmark model's coordinates (MediaPipe's BlazeFace `regression`
                 # [1, 896, 16]: argmax over box and keypoint coordinates showed 72-80% "agreement")
                 "regression", "regressors", "box", "coords", "coordinates", "landmarks", "keypoints",
                 "points", "offsets", "deltas")
CLASS_WORDS = ("logit", "logits", "prob", "probs", "probability", "probabilities", "score", "scores", "class",
               "classes", "label", "labels", "softmax", "pred", "preds", "prediction", "predictions", "cls", "token",
               "tokens", "vocab", "char", "chars", "ctc")
HIDDEN_MULTIPLE = 64


def _words(name: str) -> list[str]:
    """`last_hidden_state` -> last, hidden, state; `outputLogits` -> output, logits."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^a-z0-9]+|(?<=[a-z])(?=[0-9])", spaced.lower()) if w]


def has_class_axis(name: str, shape) -> bool:
    """Whether argmax over the last axis of output `name` of this shape is an answer (module doc)."""
    shape = list(shape)
    if not shape or not isinstance(shape[-1], int) or shape[-1] < 2:
        return False
    words = _words(name)
    if any(w in FEATURE_WORDS for w in words):
        return False
    if any(w in CLASS_WORDS for w in words):
        return True
    return len(shape) <= 2 or shape[-1] % HIDDEN_MULTIPLE != 0


def headline_outputs(names: list[str], asked: tuple[str, ...] | None) -> list[str]:
    """The outputs the headline error is over (verify.compare_models): `--outputs`, or every
    output but a KV cache's."""
    if asked:
        unknown = [a for a in asked if a not in names]
        if unknown:
            raise InputError(f"--outputs names '{unknown[0]}', which the model does not output; its outputs are: "
                             f"{', '.join(names)}")
        return [n for n in names if n in asked]
    return [n for n in names if not is_cache_output(n)] or list(names)
