"""Why ROLL's environment names that roll does not build are refused (checked against ROLL's env registry,
roll/pipeline/agentic/env/__init__.py, and the packages it builds on). The --dry_run message names the reason."""

# an env_type "<namespace>:<name>" is an id of the GEM package's registry (gem.make), which ROLL's env managers
# call for every env_type; roll's own names have no colon
GEM_PACKAGE = (
    "an environment of the GEM package (gem-llm on PyPI; ROLL pins 0.0.4), which ROLL builds with "
    "gem.make(env_type, **env_config); gem-llm cannot be installed beside roll: every release of it (0.0.4, "
    "0.1.0) pins nltk==3.9.1 while roll's IFEval checker if-verifiable 0.1.2 needs nltk>=3.9.2 (pip: "
    "ResolutionImpossible). roll's step_concat env manager (ROLL's StepConcatEnvManager) plays such games once "
    "the environment is a roll.agentic.envs.BaseEnv subclass given by dotted path (roll builds "
    "game:GuessTheNumber-v0 and rg:letter_counting itself, docs/agentic_envs.md)"
)

ROLL_ENV_TYPES = {
    "sokoban_sandbox": (
        "ROLL's SokobanSandboxEnv plays Sokoban through Alibaba's ROCK sandbox service (env_config.base_url): the "
        "rock SDK starts a container from ROCK's sokoban-sandbox image and drives a game server inside it over a "
        "shell session; roll has no ROCK client and that server is not in ROLL's tree (roll's in-process Sokoban "
        "is env_type: sokoban)"
    ),
    "rock_tb_native_env": (
        "ROLL's RockTBNativeEnv runs terminal-bench tasks in ROCK sandbox containers; roll has no ROCK client"
    ),
    "webshop": "ROLL's WebShopEnv needs the WebShop simulator (third_party/webshop-minimal), which roll does not ship",
    "deepeyes": "ROLL's DeepEyesEnv is a vision-language environment; roll builds text-only models",
}


def roll_env_refusal(env_type: str) -> str | None:
    """The reason a ROLL environment name cannot run here, or None when roll has nothing specific to say."""
    if env_type in ROLL_ENV_TYPES:
        return ROLL_ENV_TYPES[env_type]
    namespace, colon, name = env_type.partition(":")
    if colon and namespace and name and "." not in namespace:
        return GEM_PACKAGE
    return None
