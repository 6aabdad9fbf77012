"""Each RLVR rollout mode (roll.pipeline.rlvr.rollout) built from its explicit dependencies and driven through
the `Rollout` interface the pipeline uses, without Ray or a model: the engine, generate and reward callables
are test doubles named as such (ScriptedGenerator, ScriptedEngine, TableScorer); the prompt sampler is the
real one. The end-to-end runs of each mode are test_async_rollout.py, test_request_rollout.py and
test_dynamic_sampling.py."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from roll.configs.worker import RewardFilterConfig
from roll.data.prompts import PromptSampler, collate_prompts
from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.rollout import RolloutParts, build_rollout
from roll.pipeline.rlvr.rollout.async_batch import AsyncBatchRollout
from roll.pipeline.rlvr.rollout.base import OffPolicy
from roll.pipeline.rlvr.rollout.filtered import FilteredRollout
from roll.pipeline.rlvr.rollout.plain import PlainRollout
from roll.pipeline.rlvr.rollout.requests import RequestRollout, RequestSettings
from roll.strategies.base import RequestResult
from roll.utils.progress import StepTimer

N, PROMPTS, PAD = 2, 3, 0  # samples per prompt, prompts per step, pad token id


def prompt_rows(count: int = 12) -> list[dict]:
    return [
        {"prompt_ids": [7, 10 + i], "prompt_text": f"q{i}", "ground_truth": str(i), "tag": None, "domain": "math"}
        for i in range(count)
    ]


def sampler() -> PromptSampler:
    return PromptSampler(prompt_rows(), seed=3)


def prompt_index(batch: DataProto) -> list[int]:
    return [int(text[1:]) for text in batch.non_tensor_batch["prompt_text"]]


class ScriptedGenerator:
    """Test double of the pipeline's generate / submit_generation / finish_generation: each prompt's N
    samples are one fixed token (its index), nothing is sampled. Records every call as (step, round, indices)."""

    def __init__(self):
        self.calls = []

    def generate(self, rows, step, generation_round=0):
        self.calls.append((step, generation_round, [int(row["prompt_text"][1:]) for row in rows]))
        batch = collate_prompts(rows, 4, PAD)
        out = DataProto.from_dict(
            tensors={
                "prompts": batch.batch["prompts"].repeat_interleave(N, dim=0),
                "responses": torch.tensor([[10 + int(row["prompt_text"][1:])] for row in rows for _ in range(N)]),
                "response_mask": torch.ones(len(rows) * N, 1),
            },
            non_tensors={
                key: values.repeat(N) for key, values in batch.non_tensor_batch.items() if key != "ground_truth"
            },
        )
        out.non_tensor_batch["domain"] = np.array(["math"] * len(out), dtype=object)
        out.non_tensor_batch["uid"] = np.array([f"{step}-{i // N}" for i in range(len(out))], dtype=object)
        return out

    def submit_generation(self, rows, step):
        return DoneCall(self.generate(rows, step)), 0

    @staticmethod
    def finish_generation(out, pad, n):
        return out[: len(out) - pad * n] if pad else out


class DoneCall:
    """Test double of a PendingCall whose result is there at once."""

    def __init__(self, result):
        self.value, self.started = result, time.monotonic()

    def result(self):
        return self.value


class TableScorer:
    """Test double of compute_rewards: a sample's score is `table[prompt index][sample j]` (default 1.0)."""

    def __init__(self, table=None):
        self.table, self.batches = table or {}, 0

    def __call__(self, batch):
        self.batches += 1
        scores = [self.table.get(index, [1.0] * N)[j % N] for j, index in enumerate(prompt_index(batch))]
        batch.batch["scores"] = torch.tensor(scores)
        return batch


def test_plain_draws_generates_and_scores_each_step():
    generator, scorer, prompts = ScriptedGenerator(), TableScorer(), sampler()
    rollout = PlainRollout(prompts, generator.generate, scorer, batch_size=PROMPTS)
    timer = StepTimer()
    taken = rollout.take(4, timer)
    assert len(taken.batch) == PROMPTS * N and taken.metrics == {} and taken.histograms == {}
    assert generator.calls == [(4, 0, [int(row["prompt_text"][1:]) for row in taken.rows])]
    assert set(timer.timings) == {"timing/generate"} and scorer.batches == 0  # the pipeline scores it
    assert taken.scoring(taken.batch) is taken.batch and scorer.batches == 1
    assert rollout.state_dict() == {"epoch": 0, "cursor": PROMPTS}  # the sampler's own position


def test_filtered_refills_until_enough_groups_pass():
    generator, prompts = ScriptedGenerator(), sampler()
    order = [int(row["prompt_text"][1:]) for row in PromptSampler(prompt_rows(), seed=3).next_rows(12)]
    # the first two prompts drawn have all-equal rewards (std_filter drops them); every other one varies
    scorer = TableScorer({index: [0.0, 1.0] for index in order[2:]})
    filters = {"math": RewardFilterConfig("std_filter", {"std_threshold": 0.0})}
    rollout = FilteredRollout(prompts, generator.generate, scorer, PROMPTS, N, filters, True, 8)
    timer = StepTimer()
    taken = rollout.take(1, timer)
    assert [int(row["prompt_text"][1:]) for row in taken.rows] == order[2:5]
    assert [call[:2] for call in generator.calls] == [(1, 0), (1, 1)]  # a refill round with its own seed
    assert taken.metrics["dynamic_sampling/math/groups_dropped"] == 2
    assert taken.metrics["dynamic_sampling/extra_prompts"] == len(generator.calls[1][2])
    assert list(taken.batch.non_tensor_batch["uid"]) == [f"1-{i // N}" for i in range(PROMPTS * N)]
    assert set(timer.timings) == {"timing/generate_and_reward"}


def test_async_batch_queues_ahead_and_regenerates_a_too_old_batch():
    generator, scorer, prompts = ScriptedGenerator(), TableScorer(), sampler()
    schedule = OffPolicy(ahead=2, max_lag=1, stale="regenerate", last_step=9)
    rollout = AsyncBatchRollout(
        prompts, generator.submit_generation, generator.finish_generation, scorer, PROMPTS, N, schedule
    )
    rollout.start(0)
    lags = []
    for step in range(3):
        taken = rollout.take(step, StepTimer())
        lags.append(taken.metrics["async/lag"])
        assert list(taken.histograms["async/lag"]) == [int(lags[-1])] * PROMPTS * N
        if step == 0:  # steps 1 and 2 are queued: a checkpoint stores the position before step 1's prompts
            assert [call[0] for call in generator.calls] == [0, 1, 2]
            assert rollout.state_dict() == {"epoch": 0, "cursor": PROMPTS}
        rollout.after_weight_sync()
    # step 2's batch was queued at version 0: lag 2 > max_lag 1, so it is generated again at version 2
    assert lags == [0.0, 1.0, 0.0] and taken.metrics["async/regenerated_samples"] == PROMPTS * N
    assert generator.calls[-1][0] == 2 and generator.calls[-1][2] == generator.calls[2][2]  # the same prompts


class ScriptedEngine:
    """Test double of the actor_infer Cluster as the request-level rollout uses it: every request finishes at
    once with two tokens, 20 + its sample number and the EOS id 2; calls and aborts are recorded."""

    world_size, rpc_timeout = 1, None

    def __init__(self):
        self.requests, self.aborted = [], []
        self.generate_requests = self  # engine.generate_requests.submit(rank, requests)

    def submit(self, rank, requests):
        self.requests += [request_id for request_id, _, _ in requests]
        results = [RequestResult(rid, [20 + int(rid.split("-")[2]), 2], [-0.5, -0.1], "stop") for rid, _, _ in requests]
        return DoneCall(results)

    def abort_requests(self, rank, ids):
        self.aborted.append(ids)

    @staticmethod
    def first_finished(calls, timeout):
        return next(iter(calls), None)


def test_requests_stream_groups_and_open_steps_ahead():
    engine, scorer, prompts, turns = ScriptedEngine(), TableScorer(), sampler(), []
    settings = RequestSettings(
        seed=1, batch_size=PROMPTS, group_size=N, prompt_length=4, max_new_tokens=3, partial=True
    )
    schedule = OffPolicy(ahead=1, max_lag=1, stale="drop", last_step=5)
    rollout = RequestRollout(
        prompts,
        lambda: engine,
        lambda: turns.append("actor_infer"),
        ScriptedGenerator.finish_generation,
        scorer,
        PAD,
        settings,
        schedule,
    )
    try:
        rollout.start(0)
        threads = list(rollout.threads)  # the dispatcher
        taken = rollout.take(0, StepTimer())
        assert len(taken.batch) == PROMPTS * N and turns == ["actor_infer"]
        assert sorted(set(taken.batch.non_tensor_batch["uid"])) == [f"0-{i}" for i in range(PROMPTS)]
        assert taken.batch.batch["responses"][:, :2].tolist() == [[20 + j, 2] for _ in range(PROMPTS) for j in range(N)]
        assert list(taken.histograms["async/lag"]) == [0] * PROMPTS * N
        assert rollout.state_dict() == {"epoch": 0, "cursor": PROMPTS}  # step 1 is open: before its prompts
        deadline = time.monotonic() + 10
        while len(engine.requests) < 2 * PROMPTS * N and time.monotonic() < deadline:
            time.sleep(0.01)  # the dispatcher sends step 1's requests while step 0 "trains"
        assert len(engine.requests) == 2 * PROMPTS * N
        timer = StepTimer()
        rollout.before_weight_sync(timer)
        assert "timing/rollout_wait" in timer.timings
        rollout.after_weight_sync()
        taken = rollout.take(1, StepTimer())
        assert taken.metrics["async/lag_max"] == 1.0  # step 1 was generated by version 0, trained at step 1
    finally:
        rollout.close()
    assert threads and not any(thread.is_alive() for thread in threads)


def rollout_config(filter_type="no_filter", **keys) -> SimpleNamespace:
    """The config keys build_rollout and the modes read (a stand-in for RLVRConfig, which needs model files)."""
    values = {
        "generate_opt_level": 0,
        "async_generation_ratio": 0,
        "async_max_lag": None,
        "async_stale_samples": "drop",
        "max_steps": 4,
        "rollout_batch_size": PROMPTS,
        "num_return_sequences_in_group": N,
        "seed": 1,
        "prompt_length": 4,
        "partial_rollout": False,
        "is_use_additional_prompts": False,
        "max_additional_running_prompts": 0,
        "rewards": {"math": SimpleNamespace(query_filter_config=RewardFilterConfig(filter_type, {}))},
        "actor_infer": SimpleNamespace(generating_args=SimpleNamespace(max_new_tokens=3)),
    }
    return SimpleNamespace(**{**values, **keys})


@pytest.mark.parametrize(
    "keys, mode",
    [
        ({}, PlainRollout),
        ({"filter_type": "std_filter"}, FilteredRollout),
        ({"async_generation_ratio": 1}, AsyncBatchRollout),
        ({"generate_opt_level": 1, "async_generation_ratio": 1}, RequestRollout),
        ({"generate_opt_level": 1}, RequestRollout),
    ],
)
def test_build_rollout_picks_one_mode_from_the_config(keys, mode):
    generator, engine = ScriptedGenerator(), ScriptedEngine()
    parts = RolloutParts(
        sampler=sampler(),
        generate=generator.generate,
        compute_rewards=TableScorer(),
        submit_generation=generator.submit_generation,
        finish_generation=generator.finish_generation,
        engine=lambda: engine,
        use_engine=lambda: None,
        pad_token_id=PAD,
    )
    rollout = build_rollout(rollout_config(**keys), parts)
    assert type(rollout) is mode
    rollout.close()
