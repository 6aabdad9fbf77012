"""Bucketed weight sync: every transport (object store, collective, ipc) gives the engine the trainer's
exact tensors, buckets respect model_update_buffer_size_mb, and the path is chosen from the placement.

The Ray test uses one pair of real roles for all three transports: actor_train on DeepSpeed ZeRO-3 with
2 ranks (every parameter gathered collectively, both ranks must join) and actor_infer on hf_infer with
2 ranks on the same devices (ipc: each engine worker is served by the trainer rank on its device).
"""

from types import SimpleNamespace

import pytest
import torch

from roll.distributed import bucket_transport as transport
from roll.pipeline.core.weight_sync import choose_method
from roll.workers.weight_sync_worker import WeightReceiver

LIMIT_MB = 0.02  # the tiny demo model has tensors of 256 B .. 128 KB: several buckets, some single big tensors


def role(mapping, world_size=None):
    return SimpleNamespace(name="role", device_mapping=mapping, num_gpus_per_worker=1, world_size=world_size)


def test_method_follows_the_placement():
    assert choose_method("auto", role([0, 1]), role([0, 1]))[:2] == ("ipc", {0: 0, 1: 1})
    assert choose_method("auto", role([0, 1]), role([2, 3]))[:2] == ("collective", {0: 0, 1: 0})  # rank 0 sends
    assert choose_method("auto", role([0]), role([0, 1]))[0] == "object_store"  # infer rank 1 shares nothing
    assert choose_method("auto", role([0]), role(None, world_size=2))[0] == "object_store"  # CPU-only engine
    assert choose_method("ipc", role([0]), role([1]))[0] == "ipc"
    with pytest.raises(ValueError, match="valid"):
        choose_method("nccl", role([0]), role([1]))


def test_pack_unpack_is_exact_for_mixed_dtypes_and_shapes():
    bucket = [
        ("a", torch.randn(3, 5)),
        ("b", torch.randn(7).to(torch.bfloat16)),
        ("c", torch.tensor(2.5)),
        ("d", torch.arange(11, dtype=torch.int64)),
        ("e", torch.randn(4, 4).t()),
    ]  # odd sizes, non-contiguous
    buffer, entries = transport.pack(bucket)
    assert all(offset % transport.ALIGN == 0 for *_, offset in entries)
    for (name, sent), (got_name, got) in zip(bucket, transport.unpack(buffer, entries)):
        assert name == got_name and got.dtype == sent.dtype and torch.equal(got, sent)
    path, size, entries = transport.write_shm(bucket)
    try:
        for (_, sent), (_, got) in zip(bucket, transport.unpack(transport.map_shm(path, size), entries)):
            assert torch.equal(got, sent)
    finally:
        import os

        os.unlink(path)


def test_receiver_reports_the_loader_error_and_missing_buckets():
    loaded = {}

    def load(items):  # a strict loader like hf_infer's: unknown names fail
        for name, tensor in items:
            if name == "bad":
                raise KeyError("weight 'bad' has no parameter here")
            loaded[name] = tensor.clone()

    receiver = WeightReceiver(load, "actor_infer[0]", timeout_s=10)
    receiver.put([("x", torch.ones(2))])
    assert torch.equal(loaded["x"], torch.ones(2))
    with pytest.raises(RuntimeError, match="actor_infer\\[0\\].*'bad' has no parameter"):
        receiver.put([("bad", torch.ones(1))])
    assert WeightReceiver(lambda items: list(items), "r", 10).finish() == {"tensors": 0, "bytes": 0}


@pytest.fixture(scope="module")
def roles(ray_session, rlvr_config, tmp_path_factory):
    from roll.distributed.cluster import Cluster
    from roll.distributed.resource_manager import ResourceManager
    from roll.workers.actor_worker import ActorWorker

    config = rlvr_config(
        tmp_path_factory.mktemp("sync"),
        [
            "actor_train.strategy_args.strategy_config=${deepspeed_zero3}",
            "actor_train.device_mapping=[0,1]",
            "actor_train.training_args.per_device_train_batch_size=4",
            "actor_infer.device_mapping=[0,1]",
        ],
    )
    manager = ResourceManager(num_nodes=1, num_gpus_per_node=2)
    clusters = [
        Cluster(name, ActorWorker, manager, getattr(config, name), seed=config.seed)
        for name in ("actor_train", "actor_infer")
    ]
    try:
        for call in [cluster.initialize.submit() for cluster in clusters]:
            call.result()
        yield clusters
    finally:
        for cluster in clusters:
            cluster.shutdown()
        manager.shutdown()


def engine_weights(cluster) -> list[dict]:
    import ray

    def read(worker):
        return {name: p.detach().clone() for name, p in worker.strategy.module.named_parameters()}

    return ray.get([w.__ray_call__.remote(read) for w in cluster.workers], timeout=120)


def zero_engine_weights(cluster) -> None:
    import ray

    def zero(worker):
        with torch.no_grad():
            for p in worker.strategy.module.parameters():
                p.zero_()

    ray.get([w.__ray_call__.remote(zero) for w in cluster.workers], timeout=120)


@pytest.mark.parametrize("method", ["auto", "collective", "object_store"])
def test_every_path_gives_the_engine_the_trainers_exact_weights(roles, method):
    from roll.pipeline.core.weight_sync import WeightSync

    actor_train, actor_infer = roles
    sync = WeightSync(actor_train, actor_infer, probe_batch(actor_infer), buffer_size_mb=LIMIT_MB, method=method)
    assert sync.method == ("ipc" if method == "auto" else method)
    zero_engine_weights(actor_infer)  # a sync that moved nothing would leave zeros
    metrics = sync.sync_and_verify(step=0)
    expected = next(w for w in actor_train.get_weights() if w)
    for rank, got in enumerate(engine_weights(actor_infer)):
        assert sorted(got) == sorted(expected)
        different = [name for name in expected if not torch.equal(got[name], expected[name])]
        assert not different, f"{method}: actor_infer rank {rank} differs in {different[:3]}"
    limit = LIMIT_MB * 2**20
    assert metrics["weight_sync/buckets"] == len(sync.last_buckets) > 2
    assert all(b["bytes"] <= limit or b["tensors"] == 1 for b in sync.last_buckets), sync.last_buckets
    assert any(b["tensors"] > 1 for b in sync.last_buckets) and any(b["largest"] > limit for b in sync.last_buckets)
    assert sum(b["tensors"] for b in sync.last_buckets) == len(expected)
    assert metrics["weight_sync/probe_max_abs_diff"] <= 1e-6


def probe_batch(actor_infer):
    from transformers import AutoTokenizer

    from roll.data.prompts import collate_prompts

    path = actor_infer.worker_config.model_args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    row = {
        "prompt_ids": tokenizer("what is 2 plus 3")["input_ids"][:8],
        "prompt_text": "",
        "ground_truth": "",
        "tag": None,
    }
    return collate_prompts([row], 8, tokenizer.pad_token_id or 0)
