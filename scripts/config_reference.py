# ruff: noqa: E402  (this checkout goes on sys.path before roll is imported)
"""docs/configuration.md, generated from the field declarations (their types, defaults and help).

python scripts/config_reference.py > docs/configuration.md
"""

import dataclasses
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: this checkout's roll
    sys.path.insert(0, str(ROOT))

from roll.configs.loader import describe
from roll.configs.profiler import ProfilerConfig, RoleProfilerConfig
from roll.configs.worker import DataArgs, GeneratingArgs, ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig
from roll.pipeline.kinds import kind_configs

INTRO = """# Configuration reference

Generated from the dataclasses in `roll/configs/` and the pipeline kinds' config classes (the table in
`roll/pipeline/kinds.py`) by `python scripts/config_reference.py`; a test fails when this file is out of date.
Loading is strict: an unknown key fails with its full path and the closest valid name, a wrong type or value
fails with what is allowed (every number has the range given in its type column, checked at load time; all
problems of a file are reported together), and nothing is rewritten silently — fields left `null` that have a
derived value (world sizes, `max_new_tokens`, …) are filled and printed at start-up together with the batch
arithmetic and the placement plan (`--dry_run` prints them and exits). Each pipeline kind has its own top-level
section below; the roles' blocks are shared.

Any field can be set from the command line (`key=value`, `actor_train.training_args.learning_rate=1e-5`).
Top-level keys that are not fields are allowed only as shared blocks that another key interpolates
(`model_path: ...` used as `${model_path}`) or as the shipped blocks (`deepspeed_zero`, `deepspeed_zero2`,
`deepspeed_zero2_cpuoffload`, `deepspeed_zero3`, `deepspeed_zero3_cpuoffload`; `envs` sets `system_envs`,
`step_envs` / `traj_envs` define the agentic environments).

Shipped blocks are reachable from a config in any directory: they live in the package
(`roll/configs/blocks/`) and `pkg://roll.configs.blocks` is on Hydra's search path of every composition, so a
defaults list names them from the search path's root (`- /deepspeed_zero2@_here_`, then
`strategy_config: ${deepspeed_zero2}`; the leading `/` also works in a file that another config includes, where a
bare name would be looked up relative to that file's folder).
A `hydra: {searchpath: [...]}` of your YAML (or a `hydra.searchpath=[...]` override) is kept and searched
first. ROLL-style `- ../config/deepspeed_zero2@_here_` still works next to `examples/`: `examples/config/`
holds one-line redirects to the package's blocks.

ROLL-style clip keys map onto `roll.algorithms.PolicyLossConfig` in one place
(`roll.configs.policy_loss_config`): `clip_ratio = pg_clip`, `clip_ratio_low = pg_clip_low or pg_clip`,
`clip_ratio_high = pg_clip_high or pg_clip`, `clip_ratio_c = dual_clip_ratio_c` when `dual_clip_loss`
is true and infinity (a cap that never binds) when it is false; the clip_cov/kl_cov/sapo keys pass
through under their own names.
"""

# The blocks every kind's roles share; each kind's own sections follow (its config class's DOC_SECTIONS).
SHARED_SECTIONS = [
    ("`model_args`", ModelArgs),
    ("`training_args`", TrainingArgs),
    ("`data_args`", DataArgs),
    ("`generating_args`", GeneratingArgs),
    ("`strategy_args`", StrategyArgs),
    ("`profiler` (pipeline level; docs/profiling.md)", ProfilerConfig),
    ("`<role>.profiler` (per role; unset keys take the pipeline's)", RoleProfilerConfig),
]


def sections() -> list:
    """(title, class, fields to skip) of every section: the roles' block, the shared blocks, then each kind's top
    level (without the keys an earlier kind's top level lists: the same declaration) and its own blocks."""
    kinds = kind_configs()
    role_names = list(dict.fromkeys(spec.name for cls in kinds.values() for spec in cls.ROLES))
    out = [(f"Roles: {', '.join(f'`{name}`' for name in role_names)}", WorkerConfig, set())]
    out += [(title, cls, set()) for title, cls in SHARED_SECTIONS]
    documented = {cls for _, cls, _ in out}
    listed = {}  # top-level key → (the kind whose section lists it, its field declaration)
    for name, cls in kinds.items():
        fields = {field.name: field for field in dataclasses.fields(cls)}
        shared = {key for key, field in fields.items() if key in listed and listed[key][1] is field}
        article = "an" if name[0] in "aeiou" else "a"
        title = f"{name} pipeline (top level of {article} {name} YAML)"
        if shared:
            earlier = " and ".join(sorted({listed[key][0] for key in shared}))
            title = f"{name} pipeline (top level of {article} {name} YAML: the {earlier} keys, then)"
        out.append((title, cls, shared))
        for key, field in fields.items():
            listed.setdefault(key, (name, field))
        for block_title, block in cls.DOC_SECTIONS:
            if block in documented:
                continue
            documented.add(block)
            # a role-like block lists only the keys beyond a role's (those it declares itself)
            inherited = set()
            if issubclass(block, WorkerConfig):
                own = dataclasses.fields(block)
                inherited = {f.name for f in dataclasses.fields(WorkerConfig) if any(f is o for o in own)}
            out.append((block_title, block, inherited))
    return out


def _default(field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if dataclasses.is_dataclass(value):
            return "see below"
    else:
        return "required"
    if isinstance(value, bool):
        value = str(value).lower()  # YAML spelling
    return "null" if value is None else f"`{value}`"


def _rows(cls, skip=()) -> list[str]:
    hints = typing.get_type_hints(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        kind = describe(hints[field.name])
        if "bounds" in field.metadata:  # the range the loader checks
            kind += f", {'each ' if 'list' in kind else ''}{field.metadata['bounds'].describe()}"
        kind = kind.replace("|", "\\|")
        rows.append(f"| `{field.name}` | {kind} | {_default(field)} | {field.metadata.get('help', '')} |")
    return rows


def render() -> str:
    parts = [INTRO]
    for title, cls, skip in sections():
        parts.append(f"## {title}\n\n" + "\n".join(_rows(cls, skip)) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
