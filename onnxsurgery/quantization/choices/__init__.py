"""The default's choices, every one of them: they read the weights (and real inputs where the user
gave them) and return plan records (quantization/plan.py); nothing else in `quant` decides.

- planner.py: options -> a Plan, one record per float constant, the only orchestrator: STAGES,
  each a function of the Candidates (candidate.py) and one PlanContext, run in order:
  - forms.py: which forms fit: the weight's own options (own_options), its grouping and
    float16 instead (group);
  - refusals.py: what is left as it is, and why;
  - rules.py: which lowering;
  - memory_at_load.py: what stays quantized in memory at load (load_memory.py's estimates);
  - channel_axis.py: the axis of a weight kept per channel, measured;
  - lean.py: lean form or the accurate block chain, under a memory budget; small weights as float16;
  - symmetry.py: symmetric or with zero points;
  - records.py: each candidate as its record, with its why;
- planning.py: one planning run per graph, asked by the planner and by every question before
  or beside it (the required opset, "anything to change", info's estimates): each weight's
  answers computed once;
- weights.py: the facts about a weight that several stages ask (none imports another);
  float16_lean.py: the lean form of a float16 weight read in float16 (its own rule, so float32 plans
  cannot move with it);
- measures.py: a quantized weight's error in its layer's output (or in the weight), which the
  measured stages (channel_axis, lean, symmetry) share;
- model_facts.py: what the rules ask of the whole model, once per planning run;
- int4_paths.py, fused_forms.py, tensorrt_float16.py: the forms a weight's readers call for;
- plan_check.py: a plan the planner did not make here (a file's, the budget's) checked against the graph;
- allocation.py: --target-error / --target-size, each weight int4, int8, float16 or float32.

Kept free of imports on purpose: `from .choices.rules import x` must not load the planner.
"""
