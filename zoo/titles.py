"""Work logs for traceforge's span titler (a flan-t5-small distilled to write a title for a span of
activity, shipped int8 by onnxruntime's quantize_dynamic): real descriptions of steps, tokenized
with the tokenizer.json shipped beside the models; the decoder's steps come from greedy decoding
by the shipped encoder and decoder (as romanizer_steps)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from zoo.sources import dependency

TITLER = "traceforge-title-model==0.2.0"

SPANS = [  # tune on the first 8, report on the last 8
    "Opened the settings page, switched the theme to dark mode and saved the preferences.",
    "Ran the unit tests, fixed two failing assertions in the parser and pushed the branch.",
    "Searched flights from Boston to Denver, compared prices and booked the cheapest one.",
    "Wrote the quarterly sales summary, added a chart of revenue by region and emailed it to the team.",
    "Cloned the repository, installed the dependencies and started the development server.",
    "Filled in the expense report with three receipts and submitted it for approval.",
    "Read the pull request, left comments on the error handling and approved the change.",
    "Created a new spreadsheet, imported the customer list and removed duplicate rows.",
    "Updated the README with installation steps and a short usage example.",
    "Opened the calendar, moved the design review to Thursday and invited two more people.",
    "Downloaded the bank statement, categorized last month's transactions and exported a CSV.",
    "Restarted the database container, checked the logs and confirmed the migrations ran.",
    "Drafted a reply to the customer about the delayed order and attached the tracking number.",
    "Resized the product photos, compressed them and uploaded them to the online store.",
    "Reviewed the failing CI job, pinned the library version and reran the pipeline.",
    "Booked a table for four at an Italian restaurant for Friday evening.",
]


def _tokenize(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The 8 spans of the tune (seed < 1000) or report half, padded to one batch."""
    from tokenizers import Tokenizer

    from zoo.fetch import _pip_package

    tok = Tokenizer.from_file(str(_pip_package(TITLER) / "traceforge_title_model" / "data" / "span" / "tokenizer.json"))
    texts = SPANS[:8] if seed < 1000 else SPANS[8:]
    rows = [e.ids for e in tok.encode_batch(texts)]  # the tokenizer appends </s>
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)  # T5's pad id is 0
    mask = np.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return ids, mask


def titler_spans(model, seed, n):
    """The encoder's feeds: sample i is a batch of 4 spans (a different 4 each)."""
    ids, mask = _tokenize(seed)
    feeds = []
    for i in range(n):
        sel = [(2 * i + j) % 8 for j in range(4)]
        feeds.append({"input_ids": ids[sel], "attention_mask": mask[sel]})
    return feeds


def titler_steps(model, seed, n):
    """Decoder steps of greedy decoding of 4 spans' titles: sample i is step i+1 (the prefix starts
    with T5's decoder start id 0 and grows by the shipped decoder's own choices)."""
    enc = ort.InferenceSession(str(dependency("titler_encoder")), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    ids, mask = _tokenize(seed)
    ids, mask = ids[:4], mask[:4]
    hidden = enc.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    prefix = np.zeros((len(ids), 1), np.int64)
    feeds = []
    for _ in range(n):
        feed = {"input_ids": prefix.copy(), "encoder_hidden_states": hidden, "encoder_attention_mask": mask}
        feeds.append(feed)
        logits = dec.run(None, feed)[0]
        prefix = np.concatenate([prefix, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return feeds
