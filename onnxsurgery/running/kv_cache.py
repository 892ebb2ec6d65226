"""A decoder's KV cache, by its names: the one module that knows them; the others ask it.

Exporters call the cache a step reads `past_key_values.<i>.key` (optimum, the genai builder),
`past_key_<i>` or `past.<i>.key`, and the one it writes `present.<i>.key` or `present_<i>`.
Each question below keeps the test its callers have always used:

- `has_kv_cache(graph)`: a decoder fed its own past (an input whose name starts with "past").
  quant's choices ask it (choices/load_memory.py: the memory rule does not keep such a
  decoder's weights in DequantizeLinear under the default target, and the accurate chain spends
  only what the plan saves at load; rules.decoder_nbits: where only onnxruntime runs it, its
  MatMul weights are 8-bit MatMulNBits), and so does quant_file (external data by default);
- `is_cache_input(name)`: an input that holds a cache (feeds.py sizes its axes by the past
  length, the heads and the head size, and feeds a decoder its own past);
- `is_cache_output(name)`: an output that is a cache (present*), left out of the headline error
  (verify.py, evaluate.py);
- `present_names(name)`: the outputs that may carry a past input's next value, most specific
  first.
"""

from __future__ import annotations

_CACHE_PARTS = ("past_key", "past_value", "past.", "cache")


def has_kv_cache(graph) -> bool:
    """Whether `graph` (anything with `.inputs` that have `.name`) is fed its own past."""
    return any(inp.name.lower().startswith("past") for inp in graph.inputs)


def is_cache_input(name: str) -> bool:
    return any(part in name.lower() for part in _CACHE_PARTS)


def is_cache_output(name: str) -> bool:
    """A KV cache's output (optimum and the genai builder call them present.*, present_*)."""
    return name.lower().startswith("present")


def present_names(name: str) -> tuple[str, str]:
    """The output names that may carry input `name`'s next value: past_key_values.0.key ->
    present.0.key; past_key_0 -> present_key_0."""
    return name.replace("past_key_values", "present", 1), name.replace("past", "present", 1)
