"""`sokoban_native_env`: ROLL's SokobanNativeEnv (the game its AgentNativeStepEnvManager example plays) on roll's
Sokoban. As ROLL's: the system message is `system_template` and the game's instructions (the agent_native manager
sends `instructions` as the system message), each observation is the board between a header and
`observation_suffix` (a reminder of the answer format and the actions), a reply's last <answer>…</answer> is the
move, and it declares no tools. The texts are roll's own words; roll's puzzle generator (docs/agentic_envs.md)."""

import re

from roll.agentic.envs.base import EnvStep
from roll.agentic.envs.registry import register_env
from roll.agentic.envs.sokoban import ACTIONS, SokobanEnv

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
SYSTEM_TEMPLATE = "You are a helpful assistant who plays games well and aims for the highest reward."
SUFFIX = (
    "Reply with your move inside <answer> and </answer> and nothing else, for example <answer>Right</answer>. "
    f"The moves: {', '.join(ACTIONS)}.\nYour next move:"
)
INVALID_TIP = "Your last reply was not a valid move; follow the answer format exactly."


@register_env("sokoban_native_env")
class SokobanNativeEnv(SokobanEnv):
    default_config = {
        **SokobanEnv.default_config,
        "search_depth": 300,  # ROLL's SokobanNativeEnv defaults
        "system_template": None,  # null = SYSTEM_TEMPLATE
        "observation_suffix": None,  # null = SUFFIX
    }

    def __init__(self, **env_config):
        super().__init__(**env_config)
        for key in ("system_template", "observation_suffix"):
            if self.config[key] is not None and not isinstance(self.config[key], str):
                raise ValueError(f"sokoban_native_env: env_config {key!r} must be a string or null")
        self.instructions = f"{self.config['system_template'] or SYSTEM_TEMPLATE}\n\n{self.instructions}"
        self.suffix_text = self.config["observation_suffix"] or SUFFIX

    def reset(self, seed: int) -> str:
        return f"Here is the current state:\n{super().reset(seed)}\n\n{self.suffix_text}"

    def step(self, action: str) -> EnvStep:
        answers = ANSWER_RE.findall(action)  # ROLL's action_pattern default; a bare move word passes as it is
        result = super().step(answers[-1] if answers else action)
        board = self.render()
        tip = "" if result.info["action_is_valid"] else f"{INVALID_TIP}\n\n"
        result.observation = f"{tip}Current state:\n{board}\n\n{self.suffix_text}"
        return result
