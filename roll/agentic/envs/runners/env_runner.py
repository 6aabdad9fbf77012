"""EnvRunner (ROLL's GEMRunner): an agent that plays one of roll's environments through the endpoint, as a
separate program would — messages in, the reply's text out — and reports the episode's score.

It renders the episode as roll's trajectory manager does (custom_envs.<tag>.agent_system_template as a system
message; the instructions, then the first observation or agent_template filled with ROLL's placeholders, as the
first user message; each later observation as the next user message), parses each reply with action_pattern and
steps the environment. The score is the sum of the turns' rewards, each invalid action adding format_penalty, so
with the proxy manager's trajectory rows an episode trains exactly as under `env_manager: traj`. A refused
request (the context is full, max_turns served) ends the episode with the score so far.
"""

from roll.agentic.envs.runners.base import AgentRunner, EpisodeResult
from roll.agentic.envs.runners.client import EndpointRefused, chat_completion
from roll.agentic.envs.tools import wrap_with_tools
from roll.agentic.envs.turn_text import compile_action_pattern, fill_template, parse_action, with_instructions


class EnvRunner(AgentRunner):
    plays_env = True
    request_timeout = 3600.0  # seconds one request may wait for its reply (ROLL's GEMRunner http_timeout)

    @classmethod
    def check_config(cls, settings: dict) -> dict:
        return dict(settings)  # the environment's constructor checks its own keys

    def run_job(self, seed: int) -> EpisodeResult:
        env_config = self.env_config
        env = self.env_cls(**self.config)
        if env_config.tool_wrapper is not None:
            env = wrap_with_tools(env, env_config.tool_wrapper, self.tag)
        action_re = compile_action_pattern(env_config)
        try:
            observation, suffix = env.reset(seed=seed), env.reset_suffix()
            instructions = env_config.env_instruction or getattr(env, "instructions", "")
            first = with_instructions(instructions, fill_template(env_config.agent_template, observation, 0,
                                                                  env_config, suffix))  # fmt: skip
            system = [{"role": "system", "content": env_config.agent_system_template}]
            messages = [*(system if env_config.agent_system_template else []), {"role": "user", "content": first}]
            score, success, invalid, stop = 0.0, False, 0, ""
            for turn in range(env_config.max_turns):
                try:
                    reply = chat_completion(self.base_url, self.api_key, {"messages": messages}, self.request_timeout)
                except EndpointRefused as refused:
                    stop = refused.message
                    break
                text = reply["choices"][0]["message"].get("content") or ""
                messages.append({"role": "assistant", "content": text})
                result = env.step(parse_action(action_re, text))
                valid = bool(result.info.get("action_is_valid", True))
                invalid += not valid
                score += float(result.reward) + (0.0 if valid else self.format_penalty)
                if result.done:
                    success = bool(result.info.get("success", False))
                    break
                suffix = str(result.info.get("suffix", ""))
                text = fill_template(env_config.agent_template, result.observation, turn + 1, env_config, suffix)
                messages.append({"role": "user", "content": text})
            return EpisodeResult(score, success, agent_exit_reason=stop, metrics={"invalid_actions": invalid})
        finally:
            env.close()
