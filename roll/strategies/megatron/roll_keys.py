"""Keys of ROLL's megatron strategy_config (its mcore_adapter TrainingArguments) that roll's megatron strategy
does not take: dropped with a note where ROLL does not use them either, refused where they need a kernel of
ROLL's that roll does not build."""

from roll.utils.logging import get_logger

logger = get_logger("roll.strategies.megatron_train")


def take_roll_keys(given: dict) -> None:
    """Removes ROLL's keys from a strategy_config dict in place; raises ValueError for one roll cannot honour."""
    if "max_grad_norm" in given:  # ROLL overwrites it with the pipeline's max_grad_norm before megatron sees it
        logger.warning(
            "megatron strategy_config.max_grad_norm=%r is ignored, as in ROLL: the clip threshold is the role's "
            "training_args.max_grad_norm (ROLL's top-level max_grad_norm)",
            given.pop("max_grad_norm"),
        )
    if given.pop("cross_entropy_loss_fusion", False):
        raise ValueError(
            "megatron strategy_config.cross_entropy_loss_fusion (ROLL's) is refused: it selects ROLL's own fused "
            "log-prob/entropy kernel (mcore_adapter's fused_logprobs), which roll does not build (roll computes "
            "log-probs and entropy in torch); set it to false"
        )
