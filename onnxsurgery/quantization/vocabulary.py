"""quant's words, each defined once and imported wherever it is used: the integer types a
weight is stored as, the targets, and the lowerings' names. Plain tuples and no imports, so
that the CLI's --help reads them without loading a quantizer (tests/test_layers.py).

- INTEGER_DTYPES: what --dtype takes, and a plan record's integer `dtype`s (plan.py adds
  float16 and float);
- TARGETS: what --target takes (QuantRequest, QuantOptions);
- GRANULARITIES: one scale per tensor, per channel or per block (--granularity, a record's);
- INTEGER_LOWERINGS: the lowerings of quantization/lowerings/, one module each (its REGISTRY has
  exactly these keys, tests/test_layers.py checks): how stored integers turn back into a
  weight. A plan record of an integer dtype names one; QuantOptions.lowering is one or "auto";
  --lowering offers a few (request.CLI_LOWERINGS), the rules choose the others per weight.
"""

INTEGER_DTYPES = ("int8", "uint8", "int4", "uint4")
TARGETS = ("any", "onnxruntime", "tensorrt")
GRANULARITIES = ("tensor", "channel", "block")
INTEGER_LOWERINGS = ("dq", "dq_equalized", "dq_float", "dq_transposed", "arith", "arith_equalized", "gather", "scaled",
                     "scaled_input", "matmulnbits", "tied", "tied_nbits", "embed_rows")
