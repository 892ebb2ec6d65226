"""Weight quantization, in the parts the quantize pass (passes/quantize_weights.py) puts together:

- options.py: what is asked for (QuantOptions, validated) and how a weight is grouped (Scheme);
- schemes.py: per weight, whether to quantize it, its grouping, rounding and lowering;
- lean_choice.py: auto's measured lean form (with zero points or not) or the accurate block chain;
- rounding.py: the integers and scales (round to nearest, balanced), 4-bit packing;
- gptq.py, calibration.py: GPTQ rounding from calibration inputs;
- lowerings.py, nodes.py, gathered.py, scaled.py, matmul_nbits.py: the nodes that turn the
  integers back into the weight, one module per lowering that rewrites the readers;
- estimates.py: the bytes a weight stores, measured or predicted from its shape (`info`).
"""
