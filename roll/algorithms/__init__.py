"""Pure-torch RL maths with verl's numbers. No Ray, no engines.

The formulas, section by section: docs/algorithms.md and docs/rollout_correction.md. The losses of the SFT, DPO,
offline- and on-policy-distillation pipelines: docs/algorithms.md §13.
"""

from . import (
    advantages,
    aggregation,
    distill,
    divergences,
    dpo,
    group_filter,
    kl,
    loss_tokens,
    opd,
    policy_losses,
    reductions,
    roll_estimators,
    rollout_correction,
    rollout_is,
    sft,
    shaping,
    train_infer,
    value_losses,
)
from .advantages import *  # noqa: F401,F403
from .aggregation import *  # noqa: F401,F403
from .distill import *  # noqa: F401,F403
from .divergences import *  # noqa: F401,F403
from .dpo import *  # noqa: F401,F403
from .group_filter import *  # noqa: F401,F403
from .kl import *  # noqa: F401,F403
from .loss_tokens import *  # noqa: F401,F403
from .opd import *  # noqa: F401,F403
from .policy_losses import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .roll_estimators import *  # noqa: F401,F403
from .rollout_correction import *  # noqa: F401,F403
from .rollout_is import *  # noqa: F401,F403
from .sft import *  # noqa: F401,F403
from .shaping import *  # noqa: F401,F403
from .train_infer import *  # noqa: F401,F403
from .value_losses import *  # noqa: F401,F403

__all__ = [
    name
    for module in (
        reductions,
        advantages,
        kl,
        aggregation,
        group_filter,
        policy_losses,
        value_losses,
        rollout_is,
        rollout_correction,
        shaping,
        roll_estimators,
        train_infer,
        loss_tokens,
        sft,
        dpo,
        divergences,
        distill,
        opd,
    )
    for name in module.__all__
]
