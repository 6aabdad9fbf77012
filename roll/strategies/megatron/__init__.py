"""megatron-core support: HF ⇄ Megatron weight conversion (convert.py) and model building (model.py)."""
