"""Pure-torch RL maths with verl's numbers (spec: shared/spec/rl_algorithms.md). No Ray, no engines."""
from .reductions import *  # noqa: F401,F403
from .advantages import *  # noqa: F401,F403
from .kl import *  # noqa: F401,F403
from .aggregation import *  # noqa: F401,F403
from .policy_losses import *  # noqa: F401,F403
from .value_losses import *  # noqa: F401,F403
from .rollout_is import *  # noqa: F401,F403
from .rollout_correction import *  # noqa: F401,F403
from . import reductions, advantages, kl, aggregation, policy_losses, value_losses, rollout_is, rollout_correction

__all__ = [
    name
    for module in (reductions, advantages, kl, aggregation, policy_losses, value_losses, rollout_is, rollout_correction)
    for name in module.__all__
]
