"""Cluster dispatch, placement on virtual devices, gloo across ranks, timeouts — through a real Ray."""

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import ray
import torch

from roll.distributed.cluster import Cluster
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.ray_utils import init_ray
from roll.distributed.resource_manager import ResourceManager
from roll.distributed.worker import Worker


@dataclass
class StandInWorkerConfig:  # test double for roll.configs' WorkerConfig: only what Cluster reads
    name: str
    device_mapping: list
    num_gpus_per_worker: int = 1
    world_size: int = 1
    rpc_timeout: float = 60.0

    def __post_init__(self):
        if self.device_mapping:
            self.world_size = len(self.device_mapping) // self.num_gpus_per_worker


class EchoWorker(Worker):  # test double
    @register(Dispatch.ONE_TO_ALL)
    def whoami(self):
        return self.describe_placement()

    @register(Dispatch.DP_MP_COMPUTE)
    def double(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict({"x": batch.batch["x"] * 2, "rank": torch.full_like(batch.batch["x"], self.rank)})

    @register(Dispatch.RANK0)
    def rank(self):
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def all_reduce(self):
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
        value = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(value)
        return value.item()

    @register(Dispatch.ONE_TO_ALL)
    def sleep(self, seconds):
        time.sleep(seconds)

    @register(Dispatch.ONE_TO_ALL)
    def fail(self):
        raise ValueError("boom")

    @register(Dispatch.ONE_RANK)
    def echo(self, value, suffix=""):
        return self.rank, f"{value}{suffix}"


class TensorParallelEchoWorker(EchoWorker):  # test double: ranks 2k, 2k+1 form data-parallel group k
    def data_parallel_info(self) -> dict:
        return {"dp_rank": self.rank // 2, "dp_size": self.world_size // 2, "collect": self.rank % 2 == 1}

    @register(Dispatch.DP_MP_COMPUTE)
    def received(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict({"x": batch.batch["x"], "rank": torch.full_like(batch.batch["x"], self.rank)})


class GatedWorker(EchoWorker):  # test double: a long call that only another call can end early
    groups = {"control": 2}

    @classmethod
    def concurrency_groups(cls, worker_config):
        return dict(cls.groups)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate, self.log = threading.Event(), []

    @register(Dispatch.ONE_RANK)
    def wait_for_gate(self, seconds):
        return self.gate.wait(seconds)

    @register(Dispatch.ONE_RANK, concurrency_group="control")
    def open_gate(self):
        self.gate.set()
        return True

    @register(Dispatch.ONE_TO_ALL)
    def record(self, value):
        self.log.append(value)
        return self.log


class UngatedWorker(GatedWorker):  # the same methods, no concurrency group enabled
    groups = {}


@pytest.fixture(scope="module")
def resources():
    init_ray(num_devices=4)
    yield ResourceManager(num_nodes=1, num_gpus_per_node=4)
    ray.shutdown()


def test_devices_held_by_another_manager_time_out_after_placement_timeout(resources):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"within 1 s \(placement_timeout; Ray has 0 free"):
        ResourceManager(num_nodes=1, num_gpus_per_node=4, timeout=1.0)  # `resources` holds all 4
    assert time.monotonic() - started < 30


def test_dispatch_modes(resources):
    cluster = Cluster("actor", EchoWorker, resources, StandInWorkerConfig("actor", [0, 1]), seed=0)
    out = cluster.double(DataProto.from_dict({"x": torch.arange(4)}))
    assert out.batch["x"].tolist() == [0, 2, 4, 6]
    assert out.batch["rank"].tolist() == [0, 0, 1, 1]
    assert cluster.rank() == 0
    assert cluster.all_reduce() == [3.0, 3.0]  # gloo rendezvous from the env the Worker set
    assert cluster.echo(1, "a", suffix="!") == (1, "a!") and cluster.echo(0, "b") == (0, "b")  # ONE_RANK
    for bad in (2, -1, "a", True):
        with pytest.raises(
            ValueError, match=r"actor\.echo: the first argument is the rank of the worker to call \(0\.\.1\)"
        ):
            cluster.echo(bad, "x")
    cluster.shutdown()


def test_data_parallel_dispatch_sends_each_group_its_shard_once_and_collects_once(resources):
    """4 ranks in 2 data-parallel groups of 2 (as TP2 × DP2): both ranks of a group get the same rows, each
    row reaches one group, the result is the collecting ranks' (1 and 3) in data-parallel order, and the
    driver sends 2 shards, not 4 (nor the whole batch a row slice would carry: DataProto.compact)."""
    cluster = Cluster("actor", TensorParallelEchoWorker, resources, StandInWorkerConfig("actor", [0, 1, 2, 3]), seed=0)
    batch = DataProto.from_dict({"x": torch.arange(8)})
    pending = cluster.received.submit(batch)
    per_rank = cluster._wait("received", pending.refs)  # every rank's own result, before collection
    assert [part.batch["x"].tolist() for part in per_rank] == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2
    out = pending.result()
    assert out.batch["x"].tolist() == list(range(8)) and out.batch["rank"].tolist() == [1] * 4 + [3] * 4
    shard = batch[slice(0, 4)].compact().nbytes()
    assert cluster.last_sent_bytes == 2 * shard == cluster.sent_bytes and shard < batch[slice(0, 4)].nbytes()
    cluster.shutdown()


def test_colocated_roles_share_bundles_and_separate_roles_do_not(resources):
    pg = resources.placement_group.id.hex()

    def used():  # Ray's own accounting of each bundle (= device) of the placement group
        free = ray.available_resources()
        return [round(1 - free.get(f"roll_device_group_{i}_{pg}", 0.0), 2) for i in range(4)]

    deadline = time.monotonic() + 30  # earlier tests' workers release their shares asynchronously
    while any(used()) and time.monotonic() < deadline:
        time.sleep(0.2)
    before = used()
    train = Cluster("train", EchoWorker, resources, StandInWorkerConfig("train", [0, 1]), seed=0)
    infer = Cluster("infer", EchoWorker, resources, StandInWorkerConfig("infer", [0, 1]), seed=0)
    train.whoami(), infer.whoami()
    after_colocated = used()
    other = Cluster("other", EchoWorker, resources, StandInWorkerConfig("other", [2, 3]), seed=0)
    other.whoami()
    after_separate = used()
    delta = [round(a - b, 2) for a, b in zip(after_colocated, before)]
    assert delta == [0.02, 0.02, 0.0, 0.0]  # train and infer both sit on devices 0 and 1
    delta = [round(a - b, 2) for a, b in zip(after_separate, after_colocated)]
    assert delta == [0.0, 0.0, 0.01, 0.01]  # the separate role touches only devices 2 and 3


def test_timeout_and_remote_error_name_role_and_method(resources):
    cluster = Cluster("reward", EchoWorker, resources, StandInWorkerConfig("reward", None, rpc_timeout=1.0), seed=0)
    with pytest.raises(TimeoutError, match=r"reward\.sleep did not answer within 1.0 s"):
        cluster.sleep(5)
    slow_free = Cluster("reward2", EchoWorker, resources, StandInWorkerConfig("reward2", None), seed=0)
    with pytest.raises(RuntimeError, match=r"reward2\.fail failed on rank 0(.|\n)*boom"):
        slow_free.fail()


def test_an_undecorated_override_keeps_the_dispatch_mode_of_the_method_it_overrides():
    from roll.distributed.cluster import dispatch_mode

    class UserWorker(EchoWorker):  # e.g. a custom reward overriding initialize without @register
        def double(self, batch):
            return super().double(batch)

        def helper(self):
            return 1

    assert dispatch_mode(UserWorker, "double") is Dispatch.DP_MP_COMPUTE
    assert dispatch_mode(UserWorker, "rank") is Dispatch.RANK0
    assert dispatch_mode(UserWorker, "helper") is None


def test_a_control_group_call_reaches_a_worker_while_a_long_call_runs(resources):
    gated = Cluster("gated", GatedWorker, resources, StandInWorkerConfig("gated", None), seed=0)
    waiting = gated.wait_for_gate.submit(0, 60.0)
    assert gated.open_gate(0) is True
    assert waiting.result() is True  # ended by the gate, not by its 60 s
    # the default queue still runs one call at a time, in submission order
    pending = [gated.record.submit(i) for i in range(20)]
    assert [p.result() for p in pending][-1] == [list(range(20))]
    gated.shutdown()

    ungated = Cluster("ungated", UngatedWorker, resources, StandInWorkerConfig("ungated", None), seed=0)
    waiting = ungated.wait_for_gate.submit(0, 2.0)
    opened = ungated.open_gate.submit(0)
    assert waiting.result() is False and opened.result() is True  # without the group it queued behind the wait
    ungated.shutdown()


@pytest.fixture(scope="module")
def request_model(tmp_path_factory):
    from transformers import GenerationConfig

    from roll.demo.tiny_model import build_tiny_model

    path = build_tiny_model(
        str(tmp_path_factory.mktemp("requests") / "model"), [f"w{i}" for i in range(40)], max_position_embeddings=4096
    )
    # EOS never sampled: the long request below can only end by its abort (or by its 2000 tokens)
    generation = GenerationConfig.from_pretrained(path)
    generation.suppress_tokens = [generation.eos_token_id]
    generation.save_pretrained(path)
    return path


def test_only_generating_roles_get_the_control_concurrency_group():
    from roll.configs.worker import StrategyArgs
    from roll.workers.actor_worker import ActorWorker

    def groups(name):
        strategy_args = StrategyArgs(strategy_name=name) if name else None
        return ActorWorker.concurrency_groups(SimpleNamespace(strategy_args=strategy_args))

    assert groups("hf_infer") == groups("vllm") == groups("sglang") == {"control": 2}
    assert groups("deepspeed_train") == groups("megatron_infer") == groups(None) == {}


def test_request_generation_and_abort_through_the_actor_worker(resources, request_model):
    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
    from roll.workers.actor_worker import ActorWorker

    config = WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(request_model)),
        generating_args=GeneratingArgs(max_new_tokens=6, num_return_sequences=1),
        strategy_args=StrategyArgs(strategy_name="hf_infer"),
        device_mapping=[2, 3],
        rpc_timeout=120.0,
    )
    cluster = Cluster("actor_infer", ActorWorker, resources, config, seed=0)
    assert cluster.concurrency_groups == {"control": 2}
    cluster.initialize()
    prompt = [5, 6, 7, 8]
    greedy = [cluster.generate_request(rank, f"g{rank}", prompt, {"do_sample": False}) for rank in (0, 1)]
    assert greedy[1].request_id == "g1" and greedy[1].finish_reason == "length"
    assert len(greedy[1].token_ids) == len(greedy[1].log_probs) == 6  # generating_args.max_new_tokens
    assert greedy[0].token_ids == greedy[1].token_ids  # same weights on both workers

    long = cluster.generate_request.submit(0, "long", prompt, {"max_new_tokens": 2000, "seed": 1})
    deadline = time.monotonic() + 60
    while not cluster.abort_request(0, "long"):  # False until the request is in flight on worker 0
        assert time.monotonic() < deadline, "the long request was never seen in flight"
        time.sleep(0.02)
    result = long.result()
    assert result.finish_reason == "abort" and 1 <= len(result.token_ids) < 2000
    assert len(result.log_probs) == len(result.token_ids)
    assert cluster.abort_request(0, "long") is False  # finished: a no-op
    again = cluster.generate_request(0, "after", prompt, {"do_sample": False})
    assert again.token_ids == greedy[0].token_ids  # the worker serves requests after an abort
    with pytest.raises(RuntimeError, match=r"actor_infer\.generate_request failed on rank 1 of 2(.|\n)*\['n'\]"):
        cluster.generate_request(1, "bad", prompt, {"n": 2})
    cluster.shutdown()


class ValueHeadProbe(Worker):  # test double: the critic's model loading (strategies' load_model), no engine
    model_kind = "value"

    @register(Dispatch.ONE_TO_ALL)
    def value_head(self):
        from roll.strategies.base import InferenceStrategy

        return InferenceStrategy(self).load_model().score.weight.detach().clone()  # the randomly initialised head


def test_workers_are_seeded_from_the_config_seed_and_their_rank(resources, tmp_path):
    from roll.configs import ModelArgs, WorkerConfig
    from roll.demo.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"), ["one two three"], num_layers=1)
    two, one = (WorkerConfig(name="critic", model_args=ModelArgs(str(model)), world_size=n) for n in (2, 1))
    runs = {"a": (1, two), "again": (1, one), "b": (2, one)}  # rank 0 of each; rank 1 of "a" (4 workers to start)
    clusters = {
        name: Cluster("critic", ValueHeadProbe, resources, cfg, seed=seed) for name, (seed, cfg) in runs.items()
    }
    try:
        pending = {name: cluster.value_head.submit() for name, cluster in clusters.items()}  # start in parallel
        heads = {name: call.result() for name, call in pending.items()}
    finally:
        for cluster in clusters.values():
            cluster.shutdown()
    assert torch.equal(heads["a"][0], heads["again"][0])  # same seed, same rank: same head
    assert not torch.equal(heads["a"][0], heads["b"][0])  # another seed: another head
    assert not torch.equal(heads["a"][0], heads["a"][1])  # ranks draw different streams
