"""The extra FSDP2 units of ROLL's `wrap_policy` (besides transformer_layer_cls_to_wrap = wrap_modules):

    wrap_embeddings  the input embeddings as their own unit (gathered only around the embedding lookup)
    wrap_lm_output   the output layer (lm_head) as its own unit
    moe_experts      modules of these class names as their own units — as in ROLL, only on an MoE model and
                     with apply_expert_patch: true (ROLL's guard: experts a rank's routing skips would leave
                     the other ranks waiting in the unit's all-gather)

Tied embeddings (the output layer's weight is the embedding's Parameter): FSDP2 needs a shared Parameter in
one unit, so with either flag the embeddings and the output layer become ONE unit (fully_shard of both
modules together) and the tie holds; ROLL wraps them separately, which would shard two copies.
"""

import torch


def _is_moe(model: torch.nn.Module) -> bool:
    """ROLL's test: an HF config field that only MoE configs set."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)() if config is not None else None
    keys = ("num_experts", "n_experts", "moe_num_experts", "num_local_experts", "num_experts_per_tok")
    return config is not None and any(getattr(config, key, None) for key in keys)


def extra_units(model: torch.nn.Module, fsdp_config: dict, logger) -> tuple[list, list]:
    """(units to shard before the layer units, units to shard after them); a unit is a module or a list of
    modules sharded together."""
    first, last = [], []
    embed = (
        model.get_input_embeddings()
        if fsdp_config.get("wrap_embeddings") or fsdp_config.get("wrap_lm_output")
        else None
    )
    head = model.get_output_embeddings() if fsdp_config.get("wrap_lm_output") or embed is not None else None
    tied = embed is not None and head is not None and head.weight is embed.weight
    if tied:
        first.append([embed, head])
        logger.info(
            "fsdp2 wrap_policy: tied embeddings — the embeddings and the output layer share one unit (wrap_embeddings"
            "=%s, wrap_lm_output=%s)",
            fsdp_config.get("wrap_embeddings"),
            fsdp_config.get("wrap_lm_output"),
        )
    else:
        if fsdp_config.get("wrap_embeddings"):
            first.append(embed)
        if fsdp_config.get("wrap_lm_output"):
            if head is None:
                logger.info(
                    "fsdp2 wrap_policy.wrap_lm_output: %s has no output layer; nothing to wrap", type(model).__name__
                )
            else:
                last.append(head)
    names = fsdp_config.get("moe_experts")
    if names:
        if not (_is_moe(model) and fsdp_config.get("expert_patch")):
            logger.info(
                "fsdp2 wrap_policy.moe_experts=%s not applied: ROLL wraps them only on an MoE model with "
                "apply_expert_patch: true (MoE model: %s, apply_expert_patch: %s)",
                names,
                _is_moe(model),
                fsdp_config.get("expert_patch"),
            )
        else:
            experts = [m for m in model.modules() if type(m).__name__ in set(names)]
            # transformers >= 5.2 fuses the experts: e.g. Qwen3MoeMLP remains only in dense (mlp_only) layers
            logger.info("fsdp2 wrap_policy.moe_experts=%s: %d modules wrapped as their own units", names, len(experts))
            first.extend(experts)
    return first, last
