"""Variant smoke tests, all in ONE pipeline (each pipeline start costs ~30 s on 2 CPU cores):

(a) adv_estimator: gae with a critic role (CriticWorker, deepspeed_train);
(b) use_kl_loss + add_token_level_kl with the reference on deepspeed_infer (ZeRO stage 0);
(c) rollout importance sampling (rollout_is_threshold 2.0, rollout_is: true);
(d) actor_train with 2 data-parallel ZeRO-2 workers colocated with a 2-worker actor_infer on devices 0-1;
(e) a second pipeline resumes that run from its step-1 checkpoint (by path) and reproduces step 2.
"""

import math

import pytest
import ray

from tests.pipeline.helpers import run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS = 2
CRITIC = {
    "critic": {
        "model_args": {
            "model_name_or_path": "${model_path}",
            "dtype": "float32",
            "disable_gradient_checkpointing": True,
        },
        "training_args": {"learning_rate": 1.0e-3, "per_device_train_batch_size": 8},
        "strategy_args": {"strategy_name": "deepspeed_train", "strategy_config": "${deepspeed_zero}"},
        "device_mapping": [1],
        "infer_batch_size": 32,
    }
}
OVERRIDES = [
    f"max_steps={STEPS}",
    "adv_estimator=gae",  # (a)
    "use_kl_loss=true",
    "kl_loss_coef=0.01",
    "add_token_level_kl=true",
    "init_kl_coef=0.05",  # (b)
    "reference.strategy_args.strategy_name=deepspeed_infer",
    "+reference.strategy_args.strategy_config=${deepspeed_zero}",
    "rollout_is_threshold=2.0",
    "rollout_is=true",  # (c)
    "actor_train.device_mapping=[0,1]",
    "actor_train.strategy_args.strategy_config=${deepspeed_zero2}",  # (d)
    "actor_infer.device_mapping=[0,1]",
]


def _inspect(pipeline) -> dict:
    placements = {
        name: [ray.get(w.describe_placement.remote(), timeout=60)["devices"] for w in cluster.workers]
        for name, cluster in pipeline.clusters.items()
    }
    return {
        "placements": placements,
        "train_checksums": pipeline.actor_train.state_checksum(),
        "infer_checksums": pipeline.actor_infer.state_checksum(),
    }


@pytest.fixture(scope="module")
def runs(rlvr_config, tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    config = rlvr_config(root / "out", [*OVERRIDES, "save_steps=1"], blocks=CRITIC)
    assert config.reference.strategy_args.strategy_config["zero_optimization"]["stage"] == 0
    assert config.actor_train.strategy_args.strategy_config["zero_optimization"]["stage"] == 2
    history = run_pipeline(config, inspect=_inspect)
    assert sorted(history["steps"]) == list(range(STEPS))
    checkpoint = root / "out" / "checkpoints" / "step-1"
    resumed = run_pipeline(
        rlvr_config(root / "resumed", [*OVERRIDES, f"resume_from_checkpoint={checkpoint}"], blocks=CRITIC)
    )
    return {"config": config, "history": history, "checkpoint": checkpoint, "resumed": resumed}


@pytest.fixture(scope="module")
def run(runs):
    return runs["config"], runs["history"]


def _all_steps(history, key) -> list[float]:
    values = [metrics[key] for metrics in history["steps"].values()]
    assert all(math.isfinite(v) for v in values), (key, values)
    return values


def test_a_gae_with_critic(run):
    _, history = run
    assert all(v >= 0 for v in _all_steps(history, "critic/vf_loss"))
    assert all(0 <= v <= 1 for v in _all_steps(history, "critic/vf_clipfrac"))
    assert all(v > 0 for v in _all_steps(history, "critic/grad_norm"))  # the value head did learn
    assert all("timing/values" in m for m in history["steps"].values())


def test_b_kl_loss_and_in_reward_kl_with_deepspeed_infer_reference(run):
    _, history = run
    kl_loss = _all_steps(history, "actor/kl_loss")
    penalty = _all_steps(history, "actor/reward_kl_penalty")
    assert all(v >= 0 for v in kl_loss) and max(kl_loss) > 0  # low_var_kl ≥ 0; > 0 once the actor moved
    assert penalty[0] == 0.0  # step 1: old policy == reference, KL(old‖ref) is exactly 0
    assert penalty[1] != 0.0  # step 2: the trained actor differs from the reference
    assert _all_steps(history, "actor/reward_kl_penalty_coeff") == [0.05] * STEPS
    step2 = history["steps"][1]  # token rewards = scores − β·KL: the penalty moved the mean reward
    assert step2["critic/rewards/mean"] != pytest.approx(step2["critic/score/mean"], abs=1e-9)


def test_c_rollout_is_metrics_and_no_engine_mismatch(run):
    _, history = run
    for key in (
        "mismatch/rollout_is_mean",
        "mismatch/rollout_is_eff_sample_size",
        "mismatch/rollout_is_veto_fraction",
        "mismatch/rollout_is_ratio_fraction_high",
        "mismatch/mismatch_kl",
        "mismatch/mismatch_k3_kl",
    ):
        _all_steps(history, key)
    # hf_infer and the DeepSpeed trainer compute the same fp32 log-probs: no mismatch, IS weights ≈ 1
    assert all(abs(v) < 1e-3 for v in _all_steps(history, "mismatch/mismatch_kl"))
    assert all(abs(v - 1) < 1e-3 for v in _all_steps(history, "mismatch/rollout_is_mean"))
    assert all(v == 0 for v in _all_steps(history, "mismatch/rollout_is_veto_fraction"))


def test_d_two_zero2_trainers_colocated_with_two_rollout_workers(run):
    _, history = run
    placements = history["inspected"]["placements"]
    assert placements["actor_train"] == [(0,), (1,)] and placements["actor_infer"] == [(0,), (1,)]
    train, infer = history["inspected"]["train_checksums"], history["inspected"]["infer_checksums"]
    assert len(train) == 2 and train[0] == train[1]  # data-parallel ranks hold identical weights
    assert infer == [train[0]] * 2  # both rollout workers got the trained weights
    assert all(v > 0 for v in _all_steps(history, "actor/grad_norm"))  # ZeRO-2 reports its norm
    assert all(v == 0 for v in _all_steps(history, "weight_sync/probe_max_abs_diff"))


def test_e_resume_by_path_with_critic_and_zero2_reproduces_the_next_step(runs):
    checkpoint, history, resumed = runs["checkpoint"], runs["history"], runs["resumed"]
    engine = sorted(p.name for p in (checkpoint / "actor_train" / "engine").iterdir())
    assert [name for name in engine if "optim_states" in name] == [  # one ZeRO-2 partition per rank
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    assert (checkpoint / "critic" / "engine").is_dir() and (checkpoint / "critic" / "hf").is_dir()
    assert resumed["first_step"] == 1 and sorted(resumed["steps"]) == [1]
    deterministic = {
        k: v for k, v in history["steps"][1].items() if not k.startswith(("timing/", "weight_sync/seconds"))
    }
    again = {k: v for k, v in resumed["steps"][1].items() if k in deterministic}
    assert again == deterministic  # exact: actor, critic, optimizers, sampler and RNG all restored
