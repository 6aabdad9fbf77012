"""TrajEnvManager: one training sample per trajectory.

The sample's prompt is the first turn; its response is every later token of the conversation — the
model's replies (trained, mask 1) interleaved with the observations (context, mask 0). The episode's
reward sits on the last generated token, so one advantage covers every turn of the trajectory.
"""

from roll.agentic.env_managers.base import EnvManager
from roll.agentic.env_managers.chat import TokenTrajectory


class TrajEnvManager(EnvManager):
    def _on_start(self, observation: str) -> None:
        prompt = self.chat.prompt_ids(self.user_text(observation), self.system_text())
        if len(prompt) > self.prompt_length:
            raise ValueError(
                f"custom_envs.{self.tag}: the first prompt has {len(prompt)} tokens, more than "
                f"prompt_length = {self.prompt_length}; raise prompt_length"
            )
        self.trajectory = TokenTrajectory(prompt_ids=prompt)

    def _next_prompt(self) -> list[int]:
        return self.trajectory.context_ids

    def _on_reply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        self.trajectory.add_generated(reply_ids, log_probs, self.chat.eos_token_id)

    @property
    def max_new_tokens(self) -> int:
        """ROLL's rule: a turn generates at most what the row has left, so the last turn of a long episode is
        cut to fit instead of not played; one token stays free for the end-of-turn token a cut reply gets."""
        room = self.response_length - len(self.trajectory.response_ids) - 1
        return max(1, min(self.env_config.max_tokens_per_step, room))

    def _on_observation(self, observation: str) -> bool:
        ids = self.chat.observation_ids(self.turn_text(observation))
        # the episode ends (as ROLL's, at its sequence_length) when the observation leaves no room for one
        # generated token and the end-of-turn token
        if len(self.trajectory.response_ids) + len(ids) + 2 > self.response_length:
            return False
        self.trajectory.add_context(ids)
        return True

    def samples(self) -> list[dict]:
        t = self.trajectory
        return [self._row(t.prompt_ids, t.response_ids, t.mask, t.log_probs, self.episode.score)]
