"""Running models in onnxruntime: sessions, their inputs, and comparing two models' outputs.
What the other packages use from here is listed below (tests/test_rooms.py checks that they
import nothing else, and no private name); the modules:

- sessions: onnxruntime sessions with fair settings, weights mapped, .npy arrays as initializers
- initializers: a session's graph from arrays (their buffers, no copy) and chosen If branches
- feeds: inputs generated as the graph means them (masks, positions, caches)
- generated: generated samples a session runs (lengths in turn; a decoder's own past, first step)
- samples: the user's samples read from an .npz and checked against the model's inputs
- verify: two models run on the same inputs and their outputs compared
- reference_runs: the reference's runs of a comparison (kept, batched, run ahead)
- runs: every session and run of verification, both sides' (the one seam tests patch)
- labels: what a comparison says it ran on (runtime_label), for the report
- nbits_fusion: whether onnxruntime fuses a DequantizeLinear -> MatMul into MatMulNBits after what
  follows the MatMul (a Relu awaiting its QuantizeLinear): the label's rule and the planner's
- default_crash: a graph onnxruntime 1.32's default session dies on (kept_crash: shrink's note)
- ahead: work started on another thread, its result asked for later (the reference's runs;
  the `--inputs` guard's data-free plan)
- heap: freed memory given back between sessions; threads on the main heap (glibc)
- arena: whether sessions run with onnxruntime's memory arena (by shapes or a first run)
- output_kinds: whether an output's last axis holds classes
- kv_cache: a KV cache's names: the one module that knows them
- readers: whether a rewrite changed only weights (verification's batch-2 sample)
- session_memory: the memory creating a session adds, in a fresh process

The names load on first use (PEP 562), as the top package's do: `import onnxsurgery.running`
loads no onnxruntime. Inside onnxsurgery, modules import from the module itself
(`from ..running.verify import compare_models`): the import-cycle test then sees each edge.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

# name -> the module of this package that defines it
_HOMES = {
    **dict.fromkeys(["make_inputs", "parse_shapes"], "feeds"),
    "runnable_inputs": "generated",
    "Pending": "ahead",
    **dict.fromkeys(["check_samples", "load_input_samples"], "samples"),
    **dict.fromkeys(["has_kv_cache", "is_cache_output"], "kv_cache"),
    **dict.fromkeys(["has_class_axis", "headline_outputs"], "output_kinds"),
    **dict.fromkeys(["OverLimit", "measure_in_fresh_process"], "session_memory"),
    **dict.fromkeys(["load_error", "session", "streams"], "sessions"),
    **dict.fromkeys(["compare_models", "copy_verification", "reference_ahead"], "verify"),
    "runtime_label": "labels",
    **dict.fromkeys(["FusionView", "float_gemm", "fuses", "unfused_by", "why_unfused"], "nbits_fusion"),
    "kept_crash": "default_crash",
    **dict.fromkeys(["arena_verdict", "for_capture"], "arena"),
    "batch_groups": "batched",
    "same_readers": "readers",
    "ranked_outputs": "ranked",
    **dict.fromkeys(["compare_outputs", "pooled_agreement"], "output_errors"),
}
_MODULES = ("sessions", "initializers", "feeds", "samples", "verify", "labels", "ahead", "output_errors",
            "output_kinds", "kv_cache", "session_memory", "readers", "generated", "heap", "reference_runs", "runs",
            "arena", "nbits_fusion")

__all__ = sorted(_HOMES) + list(_MODULES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, _MODULES)
