"""The shipped LoRA demo variant (examples/tiny_rlvr/rlvr_tiny_lora.yaml) end to end, one pipeline of 2 steps:
actor_train (deepspeed_train) trains adapters only, actor_infer (hf_infer) gets merged weights and the sync
check passes, no reference role is started and the KL loss reads reference log-probs from actor_train with
its adapters disabled — equal to a separate frozen copy of the base model scoring the same rows.

Own fixtures (demo data, Ray session) so this module does not depend on tests/pipeline/conftest.py."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.pipeline.helpers import make_config, run_pipeline  # noqa: E402

STEPS = 2


@pytest.fixture(scope="module")
def lora_demo_dir(tmp_path_factory):
    from roll.demo.rlvr import DemoSettings, prepare_demo

    directory = tmp_path_factory.mktemp("lora_demo")
    prepare_demo(directory, DemoSettings(warm_start_steps=40), log=lambda *_: None)
    return directory


@pytest.fixture(scope="module")
def lora_ray(lora_demo_dir):
    """Joins the test session's Ray (2 virtual devices) if one is running, else starts and stops its own."""
    import ray

    from roll.distributed.ray_utils import init_ray

    started = not ray.is_initialized()
    init_ray(num_devices=2, env_vars=make_config(lora_demo_dir, lora_demo_dir / "unused").system_envs)
    yield
    if started:
        ray.shutdown()


def _frozen_log_probs(model_dir, view) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    from roll.utils.functional import response_log_probs, slice_response_logits

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(**{k: view.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    responses = view.batch["responses"]
    return (
        response_log_probs(slice_response_logits(logits, responses.shape[1]), responses)
        * view.batch["response_mask"].float()
    )


def test_lora_demo_variant_trains_adapters_with_the_actor_as_reference(lora_demo_dir, lora_ray, tmp_path):
    from roll.configs import reference_source

    config = make_config(lora_demo_dir, tmp_path / "out", [f"max_steps={STEPS}"], config_name="rlvr_tiny_lora")
    assert config.reference is None and reference_source(config) == "actor_train"

    def inspect(pipeline):
        assert pipeline.reference is None and "reference" not in pipeline.clusters
        probe = pipeline.probe_batch()
        probe.meta_info.update(generation_config={"num_return_sequences": 1, "do_sample": True}, seed=1)
        generated = pipeline.actor_infer.generate(probe)
        view = generated.select(
            batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        )
        view.meta_info["temperature"] = 1.0
        return {
            "view": view,
            "reference": pipeline.actor_train.compute_reference_log_probs(view).batch["log_probs"],
            "actor": pipeline.actor_train.compute_log_probs(view).batch["log_probs"],
        }

    history = run_pipeline(config, inspect=inspect)
    steps = history["steps"]
    assert sorted(steps) == list(range(STEPS))
    # the sync check (checksum + probe log-probs) passed every step with merged weights
    assert all(s["weight_sync/probe_max_abs_diff"] <= 1e-4 for s in steps.values())
    assert all(abs(s["mismatch/mismatch_kl"]) < 1e-4 for s in steps.values())
    assert steps[1]["actor/kl_loss"] > 0  # reference log-probs reach the loss and the policy moved away
    inspected = history["inspected"]
    frozen = _frozen_log_probs(lora_demo_dir / "model", inspected["view"])
    assert (inspected["reference"] - frozen).abs().max().item() <= 1e-5
    assert (inspected["actor"] - frozen).abs().max().item() > 1e-4  # the adapters changed the policy
