"""env_manager: proxy (ROLL's ProxyEnvManager) and ROLL's llm_proxy keys at load time: what loads, and every
mistake refused with the key that holds it."""

import pytest

from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config
from tests.configs.test_roll_compat import CORPUS

PROGRAM = "roll.agentic.envs.runners.ProgramRunner"
AGENT = [
    "+custom_envs.Agent.env_manager=proxy",
    f"+custom_envs.Agent.agent_runner_cls={PROGRAM}",
    "+custom_envs.Agent.env_config.command=[python,agent.py]",
    "+custom_envs.Agent.max_tokens_per_step=32",
    "train_env_manager.tags=[Agent]",
]


def load(*overrides):
    return load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", list(overrides)))


def test_a_program_runner_tag_loads_with_its_settings_and_the_endpoint_defaults():
    config = load(*AGENT, "+custom_envs.Agent.env_config.agent_timeout=30", "+custom_envs.Agent.env_config."
                  "trajectory_mode=step", "adv_estimator=gigpo")  # fmt: skip
    env, manager = config.custom_envs["Agent"], config.train_env_manager
    assert (env.env_manager, env.agent_runner_cls, env.env_type) == ("proxy", PROGRAM, None)
    assert env.env_config == {"command": ["python", "agent.py"], "agent_timeout": 30, "trajectory_mode": "step"}
    assert (manager.proxy_host, manager.proxy_port, manager.llm_proxy.proxy_type) == ("127.0.0.1", 0, "policy")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (AGENT[:1] + AGENT[2:], "'custom_envs.Agent.agent_runner_cls' is required with env_manager: proxy"),
        (
            [*AGENT, "+custom_envs.Agent.env_type=frozen_lake"],
            r"\['env_type'\] set, but ProgramRunner plays no environment of roll's",
        ),
        (
            [*AGENT, "+custom_envs.Agent.env_config.timeout=3"],
            r"ProgramRunner: unknown env_config key\(s\) \['timeout'\]",
        ),
        (
            [*AGENT, "+custom_envs.Agent.env_config.agent_timeout=600"],
            "'custom_envs.Agent.env_config.agent_timeout' = 600.0 must be less than 'train_env_manager.rpc_timeout'",
        ),
        ([*AGENT, "+custom_envs.Agent.env_config.trajectory_mode=tree"], r"trajectory_mode' = 'tree': valid \('traj'"),
        ([*AGENT, "+custom_envs.Agent.env_config.tool_call_parser=hermes"], "tool_call_parser' = 'hermes': roll reads"),
        ([*AGENT, "adv_estimator=gigpo"], r"needs one row per turn: .*proxy: env_config.trajectory_mode: step\) for"),
        (
            [*AGENT, "+train_env_manager.llm_proxy.proxy_type=openai"],
            "'train_env_manager.llm_proxy.proxy_type' = 'openai' is refused: ROLL's openai proxy answers",
        ),
        (
            [*AGENT, "+train_env_manager.llm_proxy.proxy_config.model_name=x"],
            "'train_env_manager.llm_proxy.proxy_config' = {'model_name': 'x'}: the policy proxy reads no settings",
        ),
        (
            ["+custom_envs.FrozenLake.agent_runner_cls=" + PROGRAM],
            "'custom_envs.FrozenLake.agent_runner_cls' = .* only with env_manager: proxy",
        ),
        ([*AGENT, "+train_env_manager.proxy_port=70000"], "proxy_port"),
        (
            [
                "custom_envs.FrozenLake.env_manager_cls=roll.pipeline.agentic.env_manager.proxy_env_manager."
                "ProxyEnvManager",
                "custom_envs.FrozenLake.agent_runner_cls=roll.pipeline.agentic.agent_runner.rock.push_runner."
                "PushModeRunner",
            ],
            "PushModeRunner' is refused: ROLL's ROCK runners drive agents inside Alibaba's ROCK sandbox",
        ),
    ],
)
def test_proxy_mistakes_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(*overrides)


def test_rolls_gem_runner_plays_the_tags_environment_with_roll_env_runner():
    runner = "roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner"
    proxy = "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager"
    overrides = [f"custom_envs.SimpleSokoban.env_manager_cls={proxy}", f"custom_envs.SimpleSokoban.agent_runner_cls="
                 f"{runner}"]  # fmt: skip
    env = load(*overrides).custom_envs["SimpleSokoban"]
    assert (env.env_manager, env.agent_runner_cls) == ("proxy", "roll.agentic.envs.runners.EnvRunner")
    assert env.action_pattern == "<answer>(.*?)</answer>"  # lifted from env_config as for every manager
    with pytest.raises(ConfigError, match=r"custom_envs.SimpleSokoban.env_config': SokobanEnv: unknown env_config"):
        load(*overrides, "+custom_envs.SimpleSokoban.env_config.colour=red")
    with pytest.raises(ConfigError, match="EnvRunner plays an environment: set env_type"):
        load(*overrides, "custom_envs.SimpleSokoban.env_type=null")


def test_the_shipped_agent_demo_loads_without_its_module():
    """examples/agent_endpoint/frozen_lake_agent.yaml: the user's runner class is only imported by the pipeline, so
    --dry_run needs no PYTHONPATH."""
    from tests.configs.test_roll_compat import ROOT

    config = load_agentic_config(compose_config(str(ROOT / "examples" / "agent_endpoint"), "frozen_lake_agent"))
    env = config.custom_envs["FrozenLakeAgent"]
    assert (env.env_manager, env.agent_runner_cls, env.env_config) == (
        "proxy",
        "frozen_lake_agent.FrozenLakeAgent",
        {"agent_timeout": 60},
    )
