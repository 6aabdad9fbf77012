"""Every number of the config has a declared range (field_help bounds), checked when the YAML is loaded, in the
same one-message pass as every other problem; ROLL's own special values stay valid."""

import dataclasses
import math
import types
import typing

import pytest
import torch

from roll.configs import ConfigError, compose_config
from roll.configs.loader import build
from roll.pipeline.rlvr.config import load_rlvr_config
from scripts.config_reference import sections
from tests.configs.test_config import TINY


def config_classes() -> list:
    """Every dataclass a config is built from: the documented sections and whatever their fields hold."""
    found, todo = [], [cls for _, cls, _ in sections()]
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.append(cls)
        for hint in typing.get_type_hints(cls).values():
            todo += [arg for arg in _leaves(hint) if dataclasses.is_dataclass(arg)]
    return found


def _leaves(hint) -> list:
    args = typing.get_args(hint)
    return [hint] if not args else [leaf for arg in args for leaf in _leaves(arg)]


NUMERIC = [
    (cls, field)
    for cls in config_classes()
    for field in dataclasses.fields(cls)
    if field.init and set(_leaves(typing.get_type_hints(cls)[field.name])) & {int, float}
]


def test_every_numeric_field_declares_its_range():
    assert len(NUMERIC) > 100
    missing = [f"{cls.__name__}.{field.name}" for cls, field in NUMERIC if "bounds" not in field.metadata]
    assert not missing, f"int/float fields without bounds= in field_help: {missing}"


def _outside(bounds, integer: bool):
    """A value just outside `bounds`: NaN for the whole number line."""
    if bounds.low != -math.inf:
        value = bounds.low if bounds.low_open else bounds.low - (1 if integer else 0.5)
        while value in bounds.also:  # a special value (top_k: -1) is allowed: go one further
            value -= 1
    elif bounds.high != math.inf:
        value = bounds.high if bounds.high_open else bounds.high + (1 if integer else 0.5)
    else:
        assert not integer, "an integer field with no bound at all"
        return float("nan")
    return int(value) if integer else float(value)


@pytest.mark.parametrize("cls, field", NUMERIC, ids=[f"{c.__name__}.{f.name}" for c, f in NUMERIC])
def test_a_value_outside_the_range_is_refused_naming_the_key(cls, field):
    hint = typing.get_type_hints(cls)[field.name]
    integer = int in _leaves(hint) and float not in _leaves(hint)
    bad = _outside(field.metadata["bounds"], integer)
    origins = {typing.get_origin(leaf) for leaf in [hint, *typing.get_args(hint)]}
    value = [bad] if list in origins else {"key": bad} if dict in origins else bad
    with pytest.raises(ConfigError) as caught:
        build(cls, {field.name: value})
    where = {list: f"'{field.name}[0]'", dict: f"'{field.name}.key'"}.get(type(value), f"'{field.name}'")
    messages = [m for _, m in caught.value.problems if m.startswith(f"{where} = ")]
    assert messages and f": must be {field.metadata['bounds'].describe()}" in messages[0]


def test_the_reported_crashes_are_refused_at_load_in_one_message():
    with pytest.raises(ConfigError) as caught:
        load_rlvr_config(
            compose_config(
                str(TINY),
                "rlvr_tiny",
                [
                    "actor_train.training_args.per_device_train_batch_size=-4",
                    "actor_infer.infer_batch_size=0",
                    "save_steps=-3",
                ],
            )
        )
    message = str(caught.value)
    assert message.startswith("3 problems in the config")
    assert "'actor_train.training_args.per_device_train_batch_size' = -4: must be ≥ 1" in message
    assert "'actor_infer.infer_batch_size' = 0: must be ≥ 1" in message
    assert "'save_steps' = -3: must be ≥ 0" in message


def test_rolls_special_values_stay_valid():
    config = load_rlvr_config(
        compose_config(str(TINY), "rlvr_tiny", ["actor_infer.generating_args.top_k=-1", "value_clip=null"])
    )
    assert config.actor_infer.generating_args.top_k == 0 and config.value_clip is None  # -1 (off) is stored as 0
    from roll.strategies.base import InferenceStrategy

    stand_in = types.SimpleNamespace(config=config.actor_infer)  # sampling_settings reads only the role's config
    assert InferenceStrategy.sampling_settings(stand_in)["top_k"] == 0  # -1 (ROLL, vLLM) = 0 (HF) = off
    from roll.algorithms.value_losses import compute_value_loss

    vpreds, returns, values = torch.tensor([[3.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    loss, clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=None)
    assert loss.item() == pytest.approx(0.5 * 9 / 2) and clipfrac.item() == 0  # unclipped


def test_device_mapping_in_python_form_on_the_command_line_reads_like_the_yaml():
    config = load_rlvr_config(
        compose_config(
            str(TINY),
            "rlvr_tiny",
            ["num_gpus_per_node=4", "actor_infer.device_mapping=list(range(2,4))", "actor_train.device_mapping=[0,1]"],
        )
    )
    assert config.actor_infer.device_mapping == [2, 3] and config.actor_train.device_mapping == [0, 1]
    joined = ["num_gpus_per_node=4", "actor_infer.device_mapping=list(range(0,1)) + list([3])"]
    assert load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", joined)).actor_infer.device_mapping == [0, 3]
