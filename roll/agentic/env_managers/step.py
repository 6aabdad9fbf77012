"""StepEnvManager: one training sample per turn.

Each turn's prompt shows the instructions, the last `history_length` (observation, action) pairs and
the current observation; its response is exactly the reply the engine generated from that prompt.
Credit is step-wise: a turn's score is its discounted return Σ_k γ^(k−t) r_k over the rest of the
episode (γ = step_reward_gamma), so early good moves are not blamed for a late mistake as much.
"""

from roll.agentic.env_managers.base import EnvManager
from roll.agentic.env_managers.chat import TokenTrajectory


def render_step_prompt(window: list[tuple[str, str]], observation: str) -> str:
    """The earlier (observation, action) pairs, then the current observation."""
    lines = [f"Earlier state:\n{obs}\nYour action: {action}" for obs, action in window]
    return "\n".join(lines + [observation])


class StepEnvManager(EnvManager):
    def _on_start(self, observation: str) -> None:
        self.history: list[tuple[str, str]] = []
        self._prompt = None

    def _next_prompt(self) -> list[int]:
        if self._prompt is None:  # the same ids for request() and the apply() that follows
            self._prompt = self.chat.prompt_ids(self._render(), self.system_text())
            if len(self._prompt) > self.prompt_length:
                raise ValueError(
                    f"custom_envs.{self.tag}: a step prompt with history_length = "
                    f"{self.env_config.history_length} has {len(self._prompt)} tokens, more than "
                    f"prompt_length = {self.prompt_length}; raise prompt_length or lower history_length"
                )
        return self._prompt

    def _render(self) -> str:
        window = self.history[-self.env_config.history_length :] if self.env_config.history_length else []
        return self.user_text(render_step_prompt(window, self.observation))

    def _on_reply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        self.history.append((self.observation, self.episode.turns[-1].action.strip()))
        self._prompt = None

    def samples(self) -> list[dict]:
        rows, future = [], 0.0
        for index in reversed(range(len(self.episode.turns))):
            turn = self.episode.turns[index]
            future = turn.reward + self.gamma * future
            reply = TokenTrajectory(prompt_ids=turn.prompt_ids)
            reply.add_generated(turn.reply_ids, turn.log_probs, self.chat.eos_token_id)
            rows.append(
                self._row(
                    turn.prompt_ids,
                    reply.response_ids,
                    reply.mask,
                    reply.log_probs,
                    future,
                    turn_index=index,
                    state=turn.observation,  # GiGPO's anchor state
                )
            )
        return rows[::-1]
