"""Typed, strict pipeline configuration composed by Hydra.

    config = compose_config("examples/tiny_rlvr", "rlvr_tiny", ["max_steps=3"])  # Hydra: defaults + overrides
    rlvr = load_rlvr_config(config)                                               # strict dataclasses + checks

The shipped blocks (roll/configs/blocks/: `deepspeed_zero*`, `envs`, `step_envs`, `traj_envs`) are on Hydra's
search path of every composition, so a config anywhere includes them as `- /deepspeed_zero2@_here_`.
Shared blocks may sit at the top level when another key
interpolates them (`strategy_config: ${deepspeed_zero2}`) or when they are one of the shipped
blocks; any other unknown key is an error with the closest valid name.
"""

import dataclasses
import re
from pathlib import Path

from roll.configs.agentic import AgenticConfig, agentic_optimizer_steps, group_tags, num_env_workers
from roll.configs.base import PipelineConfig
from roll.configs.checks import (
    BatchPlan,
    batch_plan,
    describe_reference,
    reference_source,
    roles,
)
from roll.configs.loader import ConfigError, build, collected
from roll.configs.policy_loss import effective_policy_loss_mode, policy_loss_config
from roll.configs.rlvr import RLVRConfig
from roll.configs.worker import (
    DataArgs,
    GeneratingArgs,
    ModelArgs,
    RewardConfig,
    StrategyArgs,
    TrainingArgs,
    ValidationConfig,
    WorkerConfig,
)

__all__ = [
    "ConfigError",
    "PipelineConfig",
    "RLVRConfig",
    "WorkerConfig",
    "RewardConfig",
    "ModelArgs",
    "TrainingArgs",
    "DataArgs",
    "GeneratingArgs",
    "StrategyArgs",
    "ValidationConfig",
    "BatchPlan",
    "AgenticConfig",
    "compose_config",
    "load_rlvr_config",
    "load_agentic_config",
    "batch_plan",
    "describe_config",
    "describe_reference",
    "reference_source",
    "policy_loss_config",
    "effective_policy_loss_mode",
]

# Hydra search path entry of the shipped blocks (roll/configs/blocks/); examples/config/ redirects to them.
BLOCKS_SEARCHPATH = "pkg://roll.configs.blocks"
# Top-level blocks of the shipped files, allowed even when no key uses them.
SHIPPED_BLOCKS = (
    "deepspeed_zero",
    "deepspeed_zero2",
    "deepspeed_zero2_cpuoffload",
    "deepspeed_zero3",
    "deepspeed_zero3_cpuoffload",
)
ROLE_KEYS = ("actor_train", "actor_infer", "reference", "critic")
_INTERPOLATION = re.compile(r"\$\{\s*([A-Za-z_][\w]*)")


def compose_config(config_path: str, config_name: str, overrides: list[str] = ()):
    """Hydra composition (defaults lists, `@_here_` packages, interpolation) into a DictConfig.

    A plain `key=value` override may set any schema field, also one the YAML leaves at its default
    (Hydra alone would refuse it); a misspelled key then fails in the strict loader with a suggestion.
    """
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    directory = Path(config_path).resolve()
    if not (directory / f"{config_name}.yaml").is_file():
        raise ConfigError(
            f"--config_name {config_name!r}: {directory / (config_name + '.yaml')} does not exist "
            f"(available: {sorted(p.stem for p in directory.glob('*.yaml'))})"
        )
    searchpath = _searchpath_override(directory / f"{config_name}.yaml", overrides)
    overrides = [_set_or_add(_quote_list_call(o)) for o in overrides if _override_key(o) != "hydra.searchpath"]
    overrides.append(searchpath)
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as error:  # YAML: a broken file, named
        raise ConfigError(
            f"composing {directory / config_name}.yaml failed: {error}{_block_hint(str(error))}"
        ) from None


def _block_hint(message: str) -> str:
    """For Hydra's "Could not load '../config/deepspeed_zero3'": ROLL's path is relative to examples/, while
    the shipped block loads from any folder by its name from the search path's root."""
    shipped = {p.stem for p in (Path(__file__).parent / "blocks").glob("*.yaml")}
    hints = []
    for path in re.findall(r"Could not load '([^']+)'", message):
        name = path.rstrip("/").rpartition("/")[2]
        if name in shipped and path != f"/{name}":
            hints.append(
                f"\nhint: '{path}' is a path relative to this YAML's folder (ROLL's form, which works only beside "
                f"examples/config/); the shipped block '{name}' loads from any folder as '/{name}@_here_' "
                f"(defaults: [/{name}@_here_, ..., _self_])"
            )
    return "".join(hints)


def _searchpath_override(primary: Path, overrides) -> str:
    """hydra.searchpath = the YAML's own entries (`hydra: {searchpath: [...]}`), an override's, then the shipped
    blocks (an override of hydra.searchpath would otherwise replace the YAML's list)."""
    import yaml

    try:
        data = yaml.safe_load(primary.read_text())
    except yaml.YAMLError:
        data = None  # Hydra reports the broken file itself, with its name
    hydra = data.get("hydra") if isinstance(data, dict) else None
    entries = list(hydra.get("searchpath") or []) if isinstance(hydra, dict) else []
    for override in overrides:
        if _override_key(override) == "hydra.searchpath":
            value = override.partition("=")[2]
            entries += [e.strip() for e in value.strip("[] ").split(",") if e.strip()]
    return f"hydra.searchpath=[{','.join([*entries, BLOCKS_SEARCHPATH])}]"


def _override_key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0].strip()


def _quote_list_call(override: str) -> str:
    """`key=list(range(2,4))`: Hydra's override grammar reads list(...) as a function call and refuses it; quoted,
    it is the same string the YAML form `key: list(range(2,4))` gives (parse_device_mapping reads it, no eval)."""
    key, equals, value = override.partition("=")
    if equals and value.strip().startswith("list("):
        return f"{key}='{value.strip()}'"
    return override


def _set_or_add(override: str) -> str:
    return override if override.startswith(("+", "~")) else "++" + override


def load_config(cls, config):
    """A composed DictConfig (or plain dict) → a validated `cls` (RLVRConfig or AgenticConfig): ROLL's spellings
    translated, the strict build (every unknown key, wrong type and out-of-range number of the file in one
    message), then the config's own cross-field rules (`validate()`)."""
    data = _resolve_and_strip_shared_blocks(config, cls)
    for key in cls.DROPPABLE_MAPS:
        _drop_null_entries(data, key)
    for role in ROLE_KEYS:
        _name_role(data, role, role)
    for key in cls.NAMED_ROLE_MAPS:
        for name in list(data.get(key) or {}):
            _name_role(data[key], name, f"{key}.{name}")
    built = _build_with_roll_keys(cls, data)
    built.validate()
    return built


def load_rlvr_config(config) -> RLVRConfig:
    return load_config(RLVRConfig, config)


def load_agentic_config(config) -> AgenticConfig:
    return load_config(AgenticConfig, config)


def _build_with_roll_keys(cls, data: dict):
    """ROLL spellings translated, then the strict build; every problem of the file raised together."""
    from roll.configs.roll_compat import check_roll_keys, note_roll_spellings, translate
    from roll.configs.roll_lengths import derive_agentic_lengths

    problems = translate(data)
    extra = data.pop("__roll__", {})
    problems += derive_agentic_lengths(cls, data, extra)
    try:
        config = build(cls, data)
    except ConfigError as error:
        raise collected(problems + error.problems) from None
    problems += check_roll_keys(config, extra)
    if problems:
        raise collected(problems)
    if hasattr(config, "rewards"):
        note_roll_spellings(config, extra)
    if "derived_lengths" in extra:
        config.roll_derived_lengths = extra["derived_lengths"]  # not a field: --dry_run prints the derivation
    return config


def optimizer_steps(config) -> dict:
    """Trained role → optimizer steps per pipeline step (LR schedules), for either pipeline."""
    if isinstance(config, AgenticConfig):
        return agentic_optimizer_steps(config)
    return batch_plan(config).optimizer_steps


def _resolve_and_strip_shared_blocks(config, cls) -> dict:
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(config, DictConfig):
        config = OmegaConf.create(config)
    raw = OmegaConf.to_container(config, resolve=False)
    referenced = set(_INTERPOLATION.findall(repr(raw)))
    fields = {f.name for f in dataclasses.fields(cls)}
    shared = [key for key in raw if key not in fields and (key in referenced or key in SHIPPED_BLOCKS)]
    shared = [key for key in shared if key not in ("pretrain", "reward_pretrain")]  # roll_compat fills model paths
    try:
        data = OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as error:
        raise ConfigError(f"config interpolation failed: {error}") from None
    for key in shared:
        del data[key]
    return data


def _drop_null_entries(data: dict, key: str) -> None:
    """`rewards.math: null` in a config that includes another drops the inherited domain, as `reference: null`
    drops the role (Hydra merges a mapping key by key, so null is the only way to remove one)."""
    block = data.get(key)
    if isinstance(block, dict):
        data[key] = {name: value for name, value in block.items() if value is not None}


def _name_role(parent: dict, key: str, name: str) -> None:
    block = parent.get(key)
    if isinstance(block, dict):
        if "name" in block:
            raise ConfigError(f"'{name}.name' is set from the role's key; remove it")
        block["name"] = name


def describe_config(config) -> str:
    """Resolved config, batch arithmetic and placement plan, as printed at start-up and by --dry_run."""
    from omegaconf import OmegaConf

    from roll.configs.roll_lengths import length_lines
    from roll.distributed.resource_manager import format_plan, placement_plan

    arithmetic = _describe_envs(config) if isinstance(config, AgenticConfig) else batch_plan(config).describe()
    resolved = dataclasses.asdict(config)
    loss = effective_policy_loss_mode(config)
    resolved["policy_loss_mode"] = loss  # the loss the run uses: ROLL's pg_variant, when set, names it
    parts = [
        "resolved config:",
        OmegaConf.to_yaml(resolved).rstrip(),
        arithmetic,
        format_plan(placement_plan(roles(config)), config.num_devices, config.num_gpus_per_node),
    ]
    if isinstance(config, RLVRConfig):
        from roll.configs.roll_compat import reward_mapping

        parts.extend(reward_mapping(config))
    parts.extend(length_lines(config))
    if config.pg_variant is not None:
        parts.append(f"policy loss: {loss} (from pg_variant: {config.pg_variant}, which overrides policy_loss_mode)")
    if getattr(config, "rollout_only", False):
        parts.append(
            "rollout-only (no actor_train): each step plays rollout_batch_size episodes with actor_infer and logs "
            "their scores; nothing is trained and no checkpoint is saved (ROLL's agentic rollout pipeline)"
        )
        unused = [name for name in ("reference", "critic") if getattr(config, name) is not None]
        if unused:
            parts.append(f"note: {' and '.join(unused)} configured but not started: a rollout-only run trains nothing")
        return "\n".join(parts)
    reference = describe_reference(config)
    if reference:
        parts.append(reference)
    if config.reference is not None and not (config.use_kl_loss or config.add_token_level_kl):
        parts.append(
            "note: 'reference' is configured but use_kl_loss and add_token_level_kl are both off, so nothing "
            "reads its log-probs: it will not be started"
        )
    return "\n".join(parts)


def _describe_envs(config: AgenticConfig) -> str:
    lines = ["environments:"]
    for key in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, key)
        if manager is None:
            continue
        tags = group_tags(manager)
        per_tag = ", ".join(f"{tag} {tags.count(tag)}" for tag in manager.tags)
        lines.append(
            f"  {key:<18} {manager.num_env_groups} groups × {manager.group_size} envs = {manager.num_envs} "
            f"envs on {num_env_workers(manager)} env worker(s); groups per tag: {per_tag}"
        )
    lines.append(
        f"  trajectories per step  {config.rollout_batch_size} (= {config.episodes_per_env} episode(s) per "
        f"training env)"
    )
    for name, steps in optimizer_steps(config).items():
        lines.append(f"  {name} optimizer steps ~{steps} per pipeline step")
    train = config.train_env_manager
    for tag, env in config.custom_envs.items():
        if env.env_manager == "proxy":  # an outside agent plays: say where it finds the policy
            where = f"{train.proxy_host}:{train.proxy_port or 'a free port'}"
            lines.append(
                f"  {tag}: each episode played by {env.agent_runner_cls} through its environment worker's "
                f"OpenAI-compatible endpoint ({where} for training, a token per episode)"
            )
    return "\n".join(lines)
