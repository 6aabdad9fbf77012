"""hf_infer's strategy_config.cache_implementation = "static" (a preallocated KV cache, every prompt at its padded
width, so that a GPU can compile the decode step once per batch size) generates what the dynamic cache generates:
the same tokens, the same rollout log-probs up to float32 rounding, greedy and sampled, with prompts of several
lengths and extra left padding. On CPU transformers does not compile; the cache and the padded width are what
this checks."""

import dataclasses

import pytest
import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.hf_infer import HFInferStrategy
from tests.strategies import harness as h


def _engine(model_dir, strategy_config):
    from roll.configs.worker import GeneratingArgs
    from roll.strategies import create_strategy

    config = dataclasses.replace(  # infer_batch_size 3: two generate calls for the 6 prompts
        h.make_worker_config(model_dir, "hf_infer", strategy_config, 1, 1, 1),
        generating_args=GeneratingArgs(max_new_tokens=6, num_return_sequences=2),
    )
    engine = create_strategy("hf_infer", h.StandInWorker(config, 0, 1))
    engine.initialize()
    return engine


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    model_dir, data_file = h.prepare(tmp_path_factory.mktemp("static_cache"))
    prompts = torch.load(data_file)[0]["prompts"][:6]
    prompts = torch.cat([torch.zeros(6, 3, dtype=prompts.dtype), prompts], dim=1)  # padding no prompt needs
    return _engine(model_dir, None), _engine(model_dir, {"cache_implementation": "static"}), prompts


@pytest.mark.parametrize("sampling", [{"do_sample": False, "num_return_sequences": 1}, {}], ids=["greedy", "sampled"])
def test_static_cache_generates_what_the_dynamic_cache_generates(engines, sampling):
    dynamic, static, prompts = engines
    calls = []
    generate = static.model.generate
    static.model.generate = lambda **kw: calls.append(kw) or generate(**kw)
    try:
        out = []
        for engine in (dynamic, static):
            batch = DataProto.from_dict(
                tensors={"prompts": prompts, "attention_mask": prompts.ne(0).long()}, meta_info={"seed": 5}
            )
            out.append(engine.generate(batch, sampling))
    finally:
        static.model.generate = generate
    assert len(calls) == 2 and all(kw["cache_implementation"] == "static" for kw in calls)
    assert all(kw["input_ids"].shape[1] == prompts.shape[1] for kw in calls)  # the padded width, every batch
    a, b = out[0].batch, out[1].batch
    assert a["response_mask"].sum() > 10
    assert torch.equal(a["responses"], b["responses"]) and torch.equal(a["response_mask"], b["response_mask"])
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["attention_mask"], b["attention_mask"])
    assert (a["rollout_log_probs"] - b["rollout_log_probs"]).abs().max() < 1e-5  # float32 rounding only


def test_strategy_config_keys_are_checked():
    HFInferStrategy.check_strategy_config({"cache_implementation": "static"}, dtype="bfloat16", world_size=1)
    HFInferStrategy.check_strategy_config(None, dtype="float32", world_size=1)
    with pytest.raises(ValueError, match=r"cache_implementation = 'paged'.*valid"):
        HFInferStrategy.check_strategy_config({"cache_implementation": "paged"}, dtype="float32", world_size=1)
    with pytest.raises(ValueError, match=r"unknown strategy_config keys \['compile'\]"):
        HFInferStrategy.check_strategy_config({"compile": True}, dtype="float32", world_size=1)
