"""Greedy decoding of the committed decoder fixtures (tests/fixtures/make_decoders.py), the way
their runtimes run them: onnxruntime-genai for the builder's export, optimum's loop for a merged
decoder (first step without a past, then the cache branch). Used by test_genai_decoder.py and
test_merged_decoder.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from click.testing import CliRunner

from onnxsurgery.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
LLAMA = FIXTURES / "llama_genai"
WHISPER = FIXTURES / "whisper" / "decoder_model_merged.onnx"
VOCAB = 256
NEW_TOKENS = 8


def prompts(count: int = 6) -> list[np.ndarray]:
    """Fixed token-id prompts of 5, 6, ... tokens, past the special ids 0-2."""
    rng = np.random.default_rng(0)
    return [rng.integers(3, VOCAB, size=5 + i).astype(np.int32) for i in range(count)]


def cli_json(*args) -> dict:
    """`onnxsurgery ARGS --json`: exit 0 and its report."""
    result = CliRunner().invoke(main, [str(a) for a in args] + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def genai_greedy(folder: Path, prompt_list: list[np.ndarray]) -> list[list[int]]:
    """New tokens per prompt from onnxruntime-genai's greedy search on the model in `folder`
    (its genai_config.json names the file)."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    out = []
    for prompt in prompt_list:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + NEW_TOKENS)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        while not generator.is_done():
            generator.generate_next_token()
        out.append([int(t) for t in generator.get_sequence(0)[len(prompt):]])
        del generator
    return out


def builder_logits(sess: ort.InferenceSession, tokens) -> np.ndarray:
    """The builder export's logits [len, vocab] for `tokens`, all at once with an empty past."""
    ids = np.asarray([tokens], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, 16), np.float32)
    return sess.run(["logits"], feeds)[0][0]


def onnxruntime_greedy(path: Path, prompt_list: list[np.ndarray]) -> list[list[int]]:
    """The same greedy search in plain onnxruntime, recomputing the whole sequence each step
    (no cache): what the file computes, independently of onnxruntime-genai's loop."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = []
    for prompt in prompt_list:
        seq = [int(t) for t in prompt]
        for _ in range(NEW_TOKENS):
            seq.append(int(builder_logits(sess, seq)[-1].argmax()))
        out.append(seq[len(prompt):])
    return out


def whisper_step_feeds(sess: ort.InferenceSession, ids, encoder_states, past: dict | None) -> dict:
    """Feeds of one step of the merged decoder: without `past`, the first step (use_cache_branch
    false, empty caches, which that branch does not read)."""
    feeds = {"input_ids": np.asarray(ids, np.int64), "encoder_hidden_states": encoder_states,
             "use_cache_branch": np.array([past is not None])}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = past[i.name] if past is not None else np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    return feeds


def whisper_greedy(path: Path, encoder_states: np.ndarray, follow: list[int] | None = None,
                   start: int = 1) -> tuple[list[int], list[np.ndarray]]:
    """optimum's loop: step 1 without a past computes every cache; later steps take the
    decoder caches from `present.*.decoder.*` and keep the cross-attention ones of step 1 (the
    cache branch's present.*.encoder.* are not read). Returns the tokens and each step's logits;
    with `follow`, those tokens are fed instead of the model's own (teacher forcing), so that
    two models' logits are compared on the same sequence."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    past, ids, tokens, logits = None, [[start]], [], []
    for _ in range(NEW_TOKENS):
        out = dict(zip(names, sess.run(names, whisper_step_feeds(sess, ids, encoder_states, past))))
        logits.append(out["logits"][0, -1])
        tokens.append(int(logits[-1].argmax()))
        fresh = {"past_key_values" + k[len("present"):]: v for k, v in out.items()
                 if k.startswith("present") and (past is None or ".decoder." in k)}
        past = {**(past or {}), **fresh}
        ids = [[tokens[-1] if follow is None else follow[len(tokens) - 1]]]
    return tokens, logits
