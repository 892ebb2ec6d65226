"""The default's choices, every one of them: they read the weights (and real inputs where the user
gave them) and return plan records (quantization/plan.py); nothing else in `quant` decides.

- planner.py: options -> a Plan, one record per float constant, the only orchestrator: each
  weight a Candidate (candidate.py) that the stages read and return, in order:
  - refusals.py: what is left as it is, and why;
  - forms.py: which forms fit: the weight's own options, its grouping and rounding, float16 instead;
  - rules.py: which lowering (and, asked before planning, the opset the options need);
  - memory_at_load.py: what stays quantized in memory at load (load_memory.py's estimates);
  - lean.py: lean form or the accurate block chain, under a memory budget; small weights as float16;
  - symmetry.py: symmetric or with zero points;
  - records.py: each candidate as its record, with its why;
- model_facts.py: what the rules ask of the whole model, once per planning run;
- int4_paths.py, fused_forms.py, tensorrt_float16.py: the forms a weight's readers call for;
- plan_check.py: a plan the planner did not make here (a file's, the budget's) checked against the graph;
- allocation.py: --target-error / --target-size, each weight int4, int8, float16 or float32.

Kept free of imports on purpose: `from .choices.rules import x` must not load the planner.
"""
