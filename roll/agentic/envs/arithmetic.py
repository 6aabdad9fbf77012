"""Arithmetic questions with no tool of their own: the tools come from the env manager (custom_envs.<tag>.tool_wrapper:
native function calls with env_manager agent_native, calls inside a reply with tir). The tool demo's task."""

import random
import re

from roll.agentic.envs.base import BaseEnv, EnvStep, EpisodeCounter, check_positive_int
from roll.agentic.envs.calculator import OPS, evaluate
from roll.agentic.envs.registry import register_env

ANSWER_RE = re.compile(r"<answer>\s*(-?\d+)\s*</answer>", re.IGNORECASE)


@register_env("arithmetic")
class ArithmeticEnv(BaseEnv):
    instructions = "Answer the arithmetic question. Give the result as <answer>N</answer>."
    action_pattern = ANSWER_RE.pattern  # searched anywhere in the reply; the last one counts
    default_config = {
        "min_operand": 1,
        "max_operand": 50,
        "num_operations": 1,
        "operators": ["+"],  # drawn from + - * (Python precedence)
        "max_steps": 1,  # answers per episode (tool calls are not steps: the env manager answers them)
    }

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.min_operand = check_positive_int(self, "min_operand", minimum=0)
        self.max_operand = check_positive_int(self, "max_operand", minimum=self.min_operand)
        self.num_operations = check_positive_int(self, "num_operations")
        self.operators = self.config["operators"]
        if not isinstance(self.operators, list) or not self.operators or not set(self.operators) <= set(OPS):
            raise ValueError(f"arithmetic: env_config 'operators' must be a non-empty list of {list(OPS)}")
        self.counter = EpisodeCounter(check_positive_int(self, "max_steps"))

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        terms = [str(rng.randint(self.min_operand, self.max_operand))]
        for _ in range(self.num_operations):
            terms += [rng.choice(self.operators), str(rng.randint(self.min_operand, self.max_operand))]
        self.expression = " ".join(terms)
        self.answer = evaluate(self.expression)
        self.counter.reset()
        return f"What is {self.expression}?"

    def step(self, action: str) -> EnvStep:
        self.counter.tick("arithmetic")
        answers = ANSWER_RE.findall(action)
        if not answers:
            done = self.counter.finish(False)
            info = {"action_is_valid": False, "success": False}
            return EnvStep(f"No answer found: reply <answer>N</answer>. What is {self.expression}?", 0.0, done, info)
        success = int(answers[-1]) == self.answer
        self.counter.finish(True)
        return EnvStep("Correct." if success else "Wrong.", float(success), True,
                       {"action_is_valid": True, "success": success})  # fmt: skip
