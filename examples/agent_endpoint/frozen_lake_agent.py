"""A FrozenLake agent written against the OpenAI API, trained through roll's OpenAI-compatible endpoint.

The agent owns its environment and its loop: it shows the model the lake, asks for a move with the `openai`
client, steps the lake, and reports the episode's score (the reward, -0.1 per reply that is not a move) and
whether it reached the goal. Nothing in `play` knows about training: roll serves the model, records every request
with its tokens and log-probs, and trains on them with the score (examples/agent_endpoint/frozen_lake_agent.yaml).

    # trained (the runner class plays one episode per call, in roll's environment workers):
    PYTHONPATH=examples/agent_endpoint python examples/start_agentic_pipeline.py \\
        --config_path agent_endpoint --config_name frozen_lake_agent
    # alone, against any OpenAI-compatible server (or as a ProgramRunner command: the client reads
    # OPENAI_BASE_URL and OPENAI_API_KEY, the seed comes from ROLL_EPISODE_SEED, the result goes to
    # ROLL_EPISODE_RESULT):
    python examples/agent_endpoint/frozen_lake_agent.py --seed 3
"""

import argparse
import json
import os

import openai

from roll.agentic.envs import make_env
from roll.agentic.envs.runners import AgentRunner, EpisodeResult

NOT_A_MOVE = -0.1  # the score of a reply the lake does not understand


def play(client: openai.OpenAI, seed: int, max_turns: int = 10) -> dict:
    """One episode on the lake of `seed`: {"score", "success", "turns", "invalid_actions"}."""
    lake = make_env("frozen_lake", {})
    messages = [{"role": "user", "content": f"{lake.instructions}\n{lake.reset(seed=seed)}"}]
    result = {"score": 0.0, "success": False, "turns": 0, "invalid_actions": 0}
    try:
        for _ in range(max_turns):
            try:
                reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
            except openai.BadRequestError:  # e.g. the conversation no longer fits the model's context
                break
            move = reply.choices[0].message.content
            step = lake.step(move)
            valid = step.info["action_is_valid"]
            result["score"] += step.reward + (0.0 if valid else NOT_A_MOVE)
            result["turns"] += 1
            result["invalid_actions"] += not valid
            if step.done:
                result["success"] = bool(step.info["success"])
                break
            messages += [{"role": "assistant", "content": move}, {"role": "user", "content": step.observation}]
    finally:
        lake.close()
    return result


class FrozenLakeAgent(AgentRunner):
    """`play` as roll's agent runner (custom_envs.<tag>.agent_runner_cls): one episode per run_job."""

    def run_job(self, seed: int) -> EpisodeResult:
        with openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0) as client:
            result = play(client, seed, self.env_config.max_turns)
        return EpisodeResult(result["score"], result["success"], metrics={"invalid_actions": result["invalid_actions"]})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("ROLL_EPISODE_SEED", "0")))
    parser.add_argument("--max_turns", type=int, default=10)
    args = parser.parse_args()
    with openai.OpenAI() as client:
        outcome = play(client, args.seed, args.max_turns)
    print(json.dumps(outcome))
    if "ROLL_EPISODE_RESULT" in os.environ:
        with open(os.environ["ROLL_EPISODE_RESULT"], "w") as out:
            json.dump(outcome, out)
