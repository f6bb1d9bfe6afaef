"""One module per op: rms_norm, swiglu, rope, cross_entropy, fused_linear_ce, gated_delta_rule.

Each has `<op>_reference` (plain torch, the definition the tests compare against) and `<op>(..., backend=...)`
that runs the Triton kernel where it can (see `engine.kernels.runtime.resolve_backend`).
"""
