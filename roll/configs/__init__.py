"""Typed, strict pipeline configuration composed by Hydra.

    config = compose_config("examples/tiny_rlvr", "rlvr_tiny", ["max_steps=3"])  # Hydra: defaults + overrides
    rlvr = load_config(RLVRConfig, config)                                        # strict dataclasses + checks

A kind's config class lives in its folder (roll/pipeline/<kind>/config.py, found through the table of kinds,
roll/pipeline/kinds.py); this package holds the shared schema, the loader and the shared rules.

The shipped blocks (roll/configs/blocks/: `deepspeed_zero*`, `envs`, `step_envs`, `traj_envs`) are on Hydra's
search path of every composition, so a config anywhere includes them as `- /deepspeed_zero2@_here_`.
Shared blocks may sit at the top level when another key
interpolates them (`strategy_config: ${deepspeed_zero2}`) or when they are one of the shipped
blocks; any other unknown key is an error with the closest valid name.
"""

import dataclasses
import re
from pathlib import Path

from roll.configs.base import PipelineConfig
from roll.configs.loader import ConfigError, build, collected
from roll.configs.policy_loss import effective_policy_loss_mode, policy_loss_config
from roll.configs.rl_checks import describe_reference, reference_source
from roll.configs.roles import RoleSpec
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
    "RoleSpec",
    "WorkerConfig",
    "RewardConfig",
    "ModelArgs",
    "TrainingArgs",
    "DataArgs",
    "GeneratingArgs",
    "StrategyArgs",
    "ValidationConfig",
    "compose_config",
    "load_config",
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

    from roll.configs.hydra_errors import explain
    from roll.configs.yaml_bounds import check_config_tree

    directory = Path(config_path).resolve()
    if not (directory / f"{config_name}.yaml").exists():
        raise ConfigError(
            f"--config_name {config_name!r}: {directory / (config_name + '.yaml')} does not exist "
            f"(available: {sorted(p.stem for p in directory.glob('*.yaml'))})"
        )
    check_config_tree(directory, config_name)  # text files, bounded alias expansion, no defaults cycle
    searchpath = _searchpath_override(directory / f"{config_name}.yaml", overrides)
    given = {_set_or_add(_quote_list_call(o)): o for o in overrides if _override_key(o) != "hydra.searchpath"}
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return compose(config_name=config_name, overrides=[*given, searchpath])
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as error:  # YAML: a broken file, named
        raise ConfigError(
            f"composing {directory / config_name}.yaml failed: {explain(error, given)}{_block_hint(str(error))}"
        ) from None
    except RecursionError:  # a defaults cycle through a file check_config_tree does not read (another search path)
        raise ConfigError(
            f"composing {directory / config_name}.yaml failed: its defaults lists include each other without end "
            f"(a file that includes itself, directly or through another): remove the entry that closes the circle"
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
    """A composed DictConfig (or plain dict) → a validated `cls` (a kind's config class): ROLL's spellings
    translated, the strict build (every unknown key, wrong type and out-of-range number of the file in one
    message), then the config's own cross-field rules (`validate()`)."""
    data = _resolve_and_strip_shared_blocks(config, cls)
    for key in cls.DROPPABLE_MAPS:
        _drop_null_entries(data, key)
    for role in cls.role_specs():
        _name_role(data, role, role)
    for key in cls.NAMED_ROLE_MAPS:
        for name in list(data.get(key) or {}):
            _name_role(data[key], name, f"{key}.{name}")
    built = _build_with_roll_keys(cls, data)
    built.validate()
    return built


def _build_with_roll_keys(cls, data: dict):
    """ROLL spellings translated (with the kind's own translations), then the strict build; every problem of the
    file raised together."""
    from roll.configs.roll_compat import translate

    problems = translate(data, cls)
    extra = data.pop("__roll__", {})
    try:
        config = build(cls, data)
    except ConfigError as error:
        raise collected(problems + error.problems) from None
    problems += config.check_roll_keys(extra)
    if problems:
        raise collected(problems)
    config.note_roll_keys(extra)
    if "derived_lengths" in extra:
        config.roll_derived_lengths = extra["derived_lengths"]  # not a field: --dry_run prints the derivation
    return config


def _resolve_and_strip_shared_blocks(config, cls) -> dict:
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(config, DictConfig):
        config = OmegaConf.create(config)
    raw = OmegaConf.to_container(config, resolve=False)
    referenced = set(_INTERPOLATION.findall(repr(raw)))
    fields = {f.name for f in dataclasses.fields(cls)}
    shared = [key for key in raw if key not in fields and (key in referenced or key in SHIPPED_BLOCKS)]
    model_keys = {spec.roll_model_key for spec in cls.ROLES}  # ROLL's model-path keys: roll_compat fills the roles
    shared = [key for key in shared if key not in model_keys]
    try:
        data = OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as error:  # OmegaConf's message: the reason, then "full_key: ..." lines
        key = getattr(error, "full_key", None)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"config interpolation failed{f' at {key!r}' if key else ''}: {reason}") from None
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
    """Resolved config, the kind's arithmetic and the placement plan, as printed at start-up and by --dry_run."""
    return config.describe()
