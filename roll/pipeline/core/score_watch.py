"""A warning when a reward domain's scores carry no signal: every sample of the domain scored the same for
`steps` steps in a row (issue 42). All 0 usually means the grader never matches (wrong ground truths, an answer
format the reward does not parse, responses cut off); all at the top, that the prompts are too easy; either way
GRPO-style advantages are zero and the policy learns nothing from the domain.
"""

from roll.pipeline.core.callbacks import StepCallback
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")
CONSTANT_SCORE_STEPS = 5  # long enough that an honest run rarely hits it by chance, short of a wasted run


class ConstantScoreWarning(StepCallback):
    """Reads each step's `reward/<domain>/score/{min,max}` metrics (RLVR: RLVRPipeline.domain_scores) and warns
    once per streak, naming the domain, the score and the steps."""

    def __init__(self, steps: int = CONSTANT_SCORE_STEPS):
        self.steps = steps
        self.streaks: dict[str, tuple[float, int, int]] = {}  # domain → (score, first step, steps in a row)

    def on_step_end(self, step: int, batch, metrics: dict) -> None:
        for key, low in metrics.items():
            if not (key.startswith("reward/") and key.endswith("/score/min")):
                continue
            domain = key.removeprefix("reward/").removesuffix("/score/min")
            high = metrics.get(f"reward/{domain}/score/max")
            if high is None or low != high:
                self.streaks.pop(domain, None)
                continue
            score, first, count = self.streaks.get(domain, (low, step, 0))
            if score != low:
                first, count = step, 0
            self.streaks[domain] = (low, first, count + 1)
            if count + 1 == self.steps:
                logger.warning("%s", constant_score_message(domain, low, first + 1, step + 1))


def constant_score_message(domain: str, score: float, first: int, last: int) -> str:
    """The warning for `domain` scoring `score` on every sample of steps `first`..`last` (1-based)."""
    head = (
        f"reward domain '{domain}': every sample scored {score:g} for {last - first + 1} steps in a row "
        f"(steps {first}-{last}), so its scores carry no signal and the policy learns nothing from it: "
    )
    if score == 0:
        return head + (
            "the reward never gives credit. Check that the ground truths are the right answers, that the reward "
            "can parse the answers the model writes (e.g. \\boxed{...}), and that response_length does not cut "
            "them off (samples: sample_log_steps)"
        )
    if score >= 1:
        return head + "every answer is already right (the prompts are too easy for this model)"
    return head + "check the reward worker: it gives every answer the same score"
