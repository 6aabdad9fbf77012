"""StepConcatEnvManager: the step manager (one training sample per turn, discounted step returns) with ROLL's
"concat" prompt for GEM-style games, whose observations already say what the last action did.

Each turn's user message is custom_envs.<tag>.agent_template filled with two placeholders:
- {history}: the observations of the earlier turns of the window, one per line. As in ROLL, the window of
  history_length turns counts the current one, so at most history_length − 1 earlier observations are shown;
  the actions are not (the environment's observation reports them);
- {current_observation}: the current observation, a newline, then the last step's info["suffix"] (the
  environment's prompt for the next move, '' if it gives none).
No env_instruction is added (a GEM game's first observation is its instructions). Without an agent_template the
message is the history lines then the current observation.
"""

from roll.agentic.env_managers.step import StepEnvManager


class StepConcatEnvManager(StepEnvManager):
    def _render(self) -> str:
        earlier = self.env_config.history_length - 1
        observations = [obs for obs, _, _ in self.history[-earlier:]] if earlier > 0 else []
        history = "\n".join(observations)
        current = f"{self.observation}\n{self.suffix}"
        if self.env_config.agent_template:
            return self.env_config.agent_template.format(history=history, current_observation=current)
        return "\n".join([*observations, current])
