"""The loss contract (LossSettings) and the epoch / mini-batch loop the actor and the critic share."""

import dataclasses
import pickle
from types import SimpleNamespace

import pytest
import torch

from roll.algorithms import PolicyLossConfig
from roll.configs import compose_config, policy_loss_config
from roll.configs.policy_loss import loss_settings
from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.config import load_rlvr_config
from roll.strategies.loss_settings import LOSS_KEY, LossSettings
from roll.workers.actor_worker import ActorWorker
from roll.workers.critic_worker import CriticWorker
from tests.configs.test_config import TINY

# every config key LossSettings carries, set away from its default
OVERRIDES = {
    "ppo_epochs": 3,
    "seed": 5,
    "actor_infer.generating_args.temperature": 0.7,
    "policy_loss_mode": "gspo",
    "loss_agg_mode": "seq-mean-token-sum",
    "pg_clip": 0.3,
    "pg_clip_high": 0.28,
    "dual_clip_loss": False,
    "use_kl_loss": False,
    "kl_loss_coef": 0.25,
    "kl_loss_type": "k2",
    "entropy_loss_coef": 0.01,
    "value_clip": 0.4,
    "rl_loss_coef": 0.5,
}


def test_from_config_carries_each_config_key():
    config = load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", [f"{k}={v}" for k, v in OVERRIDES.items()]))
    settings = loss_settings(config, step=11)
    expected = {
        "ppo_epochs": 3,
        "shuffle_seed": 5 * 7919 + 11,
        "temperature": 0.7,
        "policy_loss_mode": "gspo",
        "loss_agg_mode": "seq-mean-token-sum",
        "policy_loss_config": policy_loss_config(config),
        "use_kl_loss": False,
        "kl_loss_coef": 0.25,
        "kl_loss_type": "k2",
        "entropy_loss_coef": 0.01,
        "value_clip": 0.4,
        "rl_loss_coef": 0.5,
        "global_batch_info": None,  # the training strategy sets it per optimizer step
    }
    assert {f.name for f in dataclasses.fields(LossSettings)} == set(expected)  # a new field needs a line here
    assert dataclasses.asdict(settings) == {
        k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in expected.items()
    }
    clip = settings.policy_loss_config
    assert (clip.clip_ratio_low, clip.clip_ratio_high, clip.clip_ratio_c) == (0.3, 0.28, float("inf"))
    assert loss_settings(config, step=12).shuffle_seed == settings.shuffle_seed + 1


def settings(**changes) -> LossSettings:
    base = LossSettings(
        ppo_epochs=2,
        shuffle_seed=17,
        temperature=1.0,
        policy_loss_mode="vanilla",
        loss_agg_mode="token-mean",
        policy_loss_config=PolicyLossConfig(),
        use_kl_loss=False,
        kl_loss_coef=0.0,
        kl_loss_type="low_var_kl",
        entropy_loss_coef=0.0,
        value_clip=0.5,
    )
    return dataclasses.replace(base, **changes)


def test_settings_are_frozen_travel_under_one_key_and_survive_pickling():
    batch = DataProto.from_dict(tensors={"x": torch.zeros(4, 1)})
    loss = settings()
    loss.attach(batch)
    assert list(batch.meta_info) == [LOSS_KEY] and LossSettings.of(batch[[0, 1]]) is loss  # slices keep it
    with pytest.raises(dataclasses.FrozenInstanceError):
        loss.ppo_epochs = 1
    scaled = loss.with_global_batch_info({"dp_size": 2, "batch_num_tokens": 9.0})
    assert loss.global_batch_info is None and loss.agg_scale == {}
    assert scaled.agg_scale == {"dp_size": 2, "batch_num_tokens": 9.0}
    assert pickle.loads(pickle.dumps(scaled)) == scaled  # Ray ships it inside meta_info


def test_an_untyped_loss_dict_is_refused():
    batch = DataProto.from_dict(tensors={"x": torch.zeros(2, 1)}, meta_info={LOSS_KEY: {"ppo_epochs": 1}})
    with pytest.raises(TypeError, match=r"meta_info\['loss'\] = LossSettings .* got dict"):
        LossSettings.of(batch)
    with pytest.raises(TypeError, match="got NoneType"):
        LossSettings.of(DataProto.from_dict(tensors={"x": torch.zeros(2, 1)}))


# --- the shared epoch / mini-batch loop ---------------------------------------------------------------------
class RecordingStrategy:  # test double for a training strategy: records each train_step's rows and loss_fn
    def __init__(self):
        self.calls = []

    def train_step(self, batch: DataProto, loss_fn) -> dict:
        self.calls.append((batch.batch["row"].tolist(), loss_fn))
        step = len(self.calls)
        return {"grad_norm": float(step), "lr": 0.5, "x/loss": 2.0 * step}


class TensorParallelRecordingStrategy(RecordingStrategy):  # test double: ranks 2k, 2k+1 share data-parallel rank k
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def data_parallel_info(self) -> dict:
        return {"dp_rank": self.rank // 2, "dp_size": 2, "collect": self.rank % 2 == 0}


def worker(cls, rank: int, micro: int = 2, accumulation: int = 2, strategy=None):
    """A worker object without Ray or a model: what the loop reads (rank, world_size, worker_config, strategy)."""
    training_args = SimpleNamespace(per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation)
    instance = object.__new__(cls)
    instance.rank, instance.world_size, instance.strategy = rank, 4, strategy or RecordingStrategy()
    instance.worker_config = SimpleNamespace(training_args=training_args)
    return instance


def old_order(seed: int, rows: int, epochs: int, mini_batch: int) -> list[list[int]]:
    """The mini-batch rows ActorWorker/CriticWorker.train_step drew before they shared the loop."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        order = torch.randperm(rows, generator=generator)
        out += [order[start : start + mini_batch].tolist() for start in range(0, rows, mini_batch)]
    return out


@pytest.mark.parametrize(
    "cls, loss_method, prefix, offset",
    [(ActorWorker, "_policy_loss", "actor", 0), (CriticWorker, "_value_loss", "critic", 1000)],
)
@pytest.mark.parametrize("rank", [0, 3])
def test_actor_and_critic_keep_their_shuffle_order_and_metric_names(cls, loss_method, prefix, offset, rank):
    batch = DataProto.from_dict(tensors={"row": torch.arange(12)})
    settings().attach(batch)
    role = worker(cls, rank)
    metrics = cls.train_step(role, batch)
    rows = [rows for rows, _ in role.strategy.calls]
    assert rows == old_order(17 + offset + rank, rows=12, epochs=2, mini_batch=4)  # 2 epochs × 3 mini-batches
    assert all(fn == getattr(role, loss_method) for _, fn in role.strategy.calls)
    assert list(metrics) == [f"{prefix}/grad_norm", f"{prefix}/lr", "x/loss"]  # "/" keys are kept as they are
    assert metrics == {f"{prefix}/grad_norm": 3.5, f"{prefix}/lr": 0.5, "x/loss": 7.0}  # means over 6 steps


def test_model_parallel_ranks_of_one_data_parallel_rank_draw_the_same_order():
    """Ranks sharing a shard (megatron's TP/PP ranks) must take the same mini-batches: seeded by the dp rank."""
    orders = []
    for rank in range(4):
        batch = DataProto.from_dict(tensors={"row": torch.arange(12)})
        settings().attach(batch)
        role = worker(ActorWorker, rank, strategy=TensorParallelRecordingStrategy(rank))
        ActorWorker.train_step(role, batch)
        orders.append([rows for rows, _ in role.strategy.calls])
    assert orders[0] == orders[1] == old_order(17, rows=12, epochs=2, mini_batch=4)
    assert orders[2] == orders[3] == old_order(18, rows=12, epochs=2, mini_batch=4) != orders[0]


def test_actor_and_critic_draw_different_orders_from_one_batch():
    batch = DataProto.from_dict(tensors={"row": torch.arange(12)})
    settings(ppo_epochs=1).attach(batch)
    actor, critic = worker(ActorWorker, 0), worker(CriticWorker, 0)
    ActorWorker.train_step(actor, batch)
    CriticWorker.train_step(critic, batch)
    assert len(actor.strategy.calls) == 3
    assert [r for r, _ in actor.strategy.calls] != [r for r, _ in critic.strategy.calls]
