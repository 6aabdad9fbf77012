"""The on-policy distillation kind (ROLL's examples/start_onpolicy_distill_pipeline.py): the student generates, the
teachers score the student's tokens, and the advantages are the teachers' KL alone (pure OPD). A run is an RLVR
run with other advantages, so the kind builds on the RLVR kind (tests/test_layering.py reads BUILDS_ON)."""

BUILDS_ON = ("rlvr",)
