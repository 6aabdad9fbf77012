"""Adapter-only weight sync into vLLM's LoRA support, run in one child process like vllm_scenarios.py
(`python -m tests.strategies.vllm_lora_scenarios OUT.json`); tests/strategies/test_vllm_lora.py asserts.

The trainer is `LoraTrainerDouble`: hf_infer's strategy with its model wrapped by peft exactly as the training
strategies wrap it (roll.strategies.lora.apply_lora) and their adapter export (LoraExport), so the sync runs
without a distributed training engine in the vLLM process. The pipeline's real WeightSync moves the
adapter (adapter_only=True) or the merged weights through the object-store path, and checks checksum + probe.
"""

import json
import sys
import time
import traceback
from pathlib import Path

import torch

from tests.strategies.vllm_scenarios import WORDS, RoleDouble, StandInWorker, make, prompt_batch, worker_config

ENGINE = {"max_model_len": 64, "enable_lora": True, "max_lora_rank": 8}


def trainer_double(base: Path):
    from roll.configs.worker import ModelArgs
    from roll.strategies.hf_infer import HFInferStrategy
    from roll.strategies.lora import LoraExport, apply_lora, lora_scalings, merged_hf_parameters
    from roll.strategies.train_common import checksum

    class LoraTrainerDouble(LoraExport, HFInferStrategy):
        def named_full_parameters(self, only=None):
            return ((n, p.detach()) for n, p in self.model.named_parameters() if only is None or only(n))

        def named_hf_parameters(self):
            return merged_hf_parameters(self.named_full_parameters(), lora_scalings(self.model))

        def state_checksum(self):
            return checksum(self.named_hf_parameters())

    trainer = LoraTrainerDouble(StandInWorker(worker_config(base, "hf_infer")))
    trainer.initialize()
    args = ModelArgs(model_name_or_path=str(base), lora_target="all-linear", lora_rank=4, lora_alpha=8)
    trainer.model = apply_lora(trainer.model, args).eval()
    trainer._lora_on = True
    return trainer


def train_adapters(trainer, seed: int) -> None:
    """Stands in for optimizer steps: new random adapter matrices (B is zero after peft's init)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if ".lora_" in name:
                param.copy_(0.2 * torch.randn(param.shape, generator=generator))


class TrainerRole(RoleDouble):
    """RoleDouble plus the ActorWorker methods adapter-only sync calls on actor_train / actor_infer."""

    def __init__(self, strategy):
        super().__init__(strategy)
        if hasattr(strategy, "load_adapter"):  # the engine: its own load_adapter / load_weights receive
            self.transfer.strategy = strategy

    def adapter_config(self):
        return [self.strategy.adapter_config()]

    def adapter_checksum(self):
        return [self.strategy.adapter_checksum()]


def scored(engine, trainer, vocab: int, seed: int) -> float:
    batch = prompt_batch(vocab, rows=6, seed=seed)
    batch.meta_info["seed"] = seed
    sampled = engine.generate(batch, {"num_return_sequences": 1})
    view = sampled.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
    view.meta_info["temperature"] = 1.0
    return (engine.compute_log_probs(view) - trainer.compute_log_probs(view)).abs().max().item()


def adapter_sync(workdir: Path) -> dict:
    from roll.demo.tiny_model import build_tiny_model
    from roll.pipeline.core.weight_sync import WeightSync, WeightSyncError

    base = build_tiny_model(str(workdir / "base"), WORDS, seed=3)
    trainer = trainer_double(base)
    vocab = trainer.model.config.vocab_size
    engine = make(base, "vllm", ENGINE)
    probe = prompt_batch(vocab, rows=1, seed=123)
    out = {}
    adapter = WeightSync(TrainerRole(trainer), TrainerRole(engine), probe, adapter_only=True)
    merged = WeightSync(TrainerRole(trainer), TrainerRole(engine), probe, adapter_only=False)
    before = engine.state_checksum()

    train_adapters(trainer, seed=1)
    out["adapter_sync_1"] = adapter.sync_and_verify(step=0)
    out["base_checksum_unchanged"] = engine.state_checksum() == before
    out["lp_diff_1"] = scored(engine, trainer, vocab, seed=5)
    out["lora_id_1"] = engine.lora_request.lora_int_id

    train_adapters(trainer, seed=2)  # a second "step": a new adapter id replaces the first
    try:  # not synced yet: the adapter checksum says so
        adapter._check_checksums(1, [trainer.adapter_checksum()])  # what the trainer sends now (fp32 both)
        out["stale_detected"] = None
    except WeightSyncError as error:
        out["stale_detected"] = str(error)
    out["adapter_sync_2"] = adapter.sync_and_verify(step=1)
    out["lp_diff_2"] = scored(engine, trainer, vocab, seed=6)
    out["lora_id_2"] = engine.lora_request.lora_int_id
    out["engine_loras"] = sorted(engine.llm.llm_engine.list_loras())

    out["merged_sync"] = merged.sync_and_verify(step=2)  # full merged weights: the adapter is dropped
    out["adapter_after_merged"] = engine.lora_request is None
    out["lp_diff_merged"] = scored(engine, trainer, vocab, seed=7)
    out["adapter_bytes"] = sum(t.numel() * t.element_size() for _, t in trainer.named_adapter_parameters())
    out["merged_bytes"] = sum(t.numel() * t.element_size() for _, t in trainer.named_hf_parameters())
    return out


def main(out_file: str) -> None:
    torch.set_num_threads(1)
    out_path = Path(out_file)
    started = time.perf_counter()
    try:
        results = adapter_sync(out_path.parent)
    except Exception:  # noqa: BLE001 — recorded; the test prints it
        results = {"error": traceback.format_exc()}
    results["seconds"] = time.perf_counter() - started
    out_path.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
