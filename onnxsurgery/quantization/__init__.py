"""Weight quantization: what is asked, what is planned, how it is stored.

- request.py: what the user asked (QuantRequest: None = choose for me; the CLI's options come from
  it); options.py: the resolved configuration (QuantOptions) and how a weight is grouped (Scheme);
- choices/: every decision of the default (planner, rules, lean or accurate, symmetry, budget);
- plan.py: the plan, one record per weight, as data (--dry-run prints it, --plan reads it);
- apply.py: plan -> graph edits, nothing decided there;
- lowerings/: how stored integers turn back into the weight, one module per lowering behind one
  protocol (dq, arith, gather, scaled, matmulnbits); nodes.py: the nodes they share;
- quantize.py, rounding.py: the integers and scales (round to nearest, balanced), 4-bit packing;
- gptq.py, calibration.py: GPTQ rounding from calibration inputs;
- estimates.py: the bytes a weight stores, measured or predicted from its shape (`info`).
"""
