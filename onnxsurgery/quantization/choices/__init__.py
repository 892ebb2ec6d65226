"""The default's choices, every one of them: they read the weights (and real inputs where the user
gave them) and return plan records (quantization/plan.py); nothing else in `quant` decides.

- planner.py: options -> a Plan, one record per float constant; a plan read from a file checked
  against the graph;
- rules.py: which weights, their grouping, rounding and lowering, by consumer, opset and target;
- lean.py: lean form or the accurate block chain, under a memory budget; small weights as float16;
- symmetry.py: symmetric or with zero points;
- allocation.py: --target-error / --target-size, each weight int4, int8, float16 or float32.

Kept free of imports on purpose: `from .choices.rules import x` must not load the planner.
"""
