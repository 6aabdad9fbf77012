"""The table of pipeline kinds: name → the dotted path of the kind's config class (imported on use).

A kind is one folder, roll/pipeline/<kind>/ (config.py, pipeline.py, its workers and data encoding), one launcher,
examples/start_<kind>_pipeline.py, and one line here; everything shared (the launcher's command line, the loader,
`--dry_run`, the config checks, checkpoints, scripts/check_roll_examples.py, the configuration reference) asks the
config class (roll/configs/base.py's interface), never a list of kinds of its own. docs/architecture.md, "How to
add a pipeline kind".
"""

from roll.utils.import_utils import import_class

KINDS = {
    "rlvr": "roll.pipeline.rlvr.config.RLVRConfig",
    "agentic": "roll.pipeline.agentic.config.AgenticConfig",
    "sft": "roll.pipeline.sft.config.SFTConfig",
}


def kind_config(name: str) -> type:
    """The config class of the kind `name`."""
    if name not in KINDS:
        raise KeyError(f"no pipeline kind {name!r}; kinds: {list(KINDS)}")
    return import_class(KINDS[name])


def kind_configs() -> dict[str, type]:
    """Every kind's config class, in the table's order."""
    return {name: kind_config(name) for name in KINDS}


def load_kind_config(name: str, composed):
    """A composed DictConfig → the kind's validated config (roll.configs.load_config with its class)."""
    from roll.configs import load_config

    return load_config(kind_config(name), composed)
