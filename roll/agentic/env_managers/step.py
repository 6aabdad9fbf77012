"""StepEnvManager: one training sample per turn.

Each turn's prompt shows the instructions, the last `history_length` (observation, action) pairs and
the current observation, or custom_envs.<tag>.agent_template filled with ROLL's step placeholders; its
response is exactly the reply the engine generated from that prompt.
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
        self.history: list[tuple[str, str, float]] = []  # (observation, action, reward) per turn
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
        if self.env_config.agent_template:
            return self._render_template(window)
        return self.user_text(render_step_prompt([(obs, action) for obs, action, _ in window], self.observation))

    def _render_template(self, window: list) -> str:
        """custom_envs.<tag>.agent_template with ROLL's step placeholders (STEP_TEMPLATE_FIELDS)."""
        taken = len(self.episode.turns)
        history = [
            f"(step: {taken - len(window) + i + 1}, observation: {obs}, action: {action}, reward: {reward})"
            for i, (obs, action, reward) in enumerate(window)
        ]
        return self.env_config.agent_template.format(
            env_instruction=self.env_config.env_instruction or getattr(self.env, "instructions", ""),
            history=", ".join(history),
            step_count=taken,
            history_length=len(window),
            current_step=taken + 1,
            current_observation=self.observation,
            max_response_length=self.env_config.max_tokens_per_step,
        )

    def _on_reply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        turn = self.episode.turns[-1]
        self.history.append((self.observation, turn.action.strip(), turn.reward))
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
