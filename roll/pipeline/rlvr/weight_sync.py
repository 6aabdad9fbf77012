"""actor_train → actor_infer weight sync, verified after every sync.

Two checks: a parameter checksum (catches a skipped or partial load) and the log-probs of a fixed
probe (prompt + greedy response) under both roles (catches an engine that loaded the tensors but
still computes with stale ones, e.g. a cached tied output layer). Either mismatch stops the run.
"""
import time

import ray

from roll.utils.logging import get_logger

logger = get_logger("roll.weight_sync")

CHECKSUM_RTOL = 1e-6
# fp32 forward passes of the same weights in two engines agree to ~1e-6; bf16 needs far more room.
PROBE_TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2, "float16": 5e-2}


class WeightSyncError(RuntimeError):
    pass


class WeightSync:
    def __init__(self, actor_train, actor_infer, probe_prompt):
        self.actor_train, self.actor_infer = actor_train, actor_infer
        self.probe_prompt = probe_prompt
        self.tolerance = PROBE_TOLERANCE[actor_infer.worker_config.model_args.dtype]

    def sync_and_verify(self, step: int) -> dict:
        started = time.perf_counter()
        weights = next(w for w in self.actor_train.get_weights() if w)
        size_mb = sum(t.numel() * t.element_size() for t in weights.values()) / 2**20
        self.actor_infer.load_weights(ray.put(weights))
        seconds = time.perf_counter() - started
        self._check_checksums(step)
        probe_diff = self._check_probe(step)
        return {"weight_sync/seconds": seconds, "weight_sync/size_mb": size_mb,
                "weight_sync/probe_max_abs_diff": probe_diff}

    def _check_checksums(self, step: int) -> None:
        expected = self.actor_train.state_checksum()[0]
        for rank, got in enumerate(self.actor_infer.state_checksum()):
            if abs(got - expected) > CHECKSUM_RTOL * max(abs(expected), 1.0):
                raise WeightSyncError(
                    f"step {step}: after weight sync actor_infer rank {rank} has parameter checksum {got!r}, "
                    f"actor_train has {expected!r}: the inference engine did not load the trained weights")

    def _check_probe(self, step: int) -> float:
        probe = self.probe_prompt
        probe.meta_info.update(generation_config={"num_return_sequences": 1, "do_sample": False}, seed=0)
        world = self.actor_infer.world_size
        generated = self.actor_infer.generate(_repeat_rows(probe, world))
        train_world = self.actor_train.world_size
        view = generated.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses",
                                            "response_mask"])
        view.meta_info["temperature"] = 1.0
        infer_lp = self.actor_infer.compute_log_probs(_repeat_rows(view[[0]], world)).batch["log_probs"][0]
        train_lp = self.actor_train.compute_log_probs(_repeat_rows(view[[0]], train_world)).batch["log_probs"][0]
        diff = (infer_lp - train_lp).abs().max().item()
        if diff > self.tolerance:
            raise WeightSyncError(
                f"step {step}: probe log-probs differ by {diff:.3g} between actor_infer and actor_train "
                f"(tolerance {self.tolerance:g}): the inference engine is computing with stale or wrong weights")
        return diff


def _repeat_rows(batch, times: int):
    from roll.distributed.data_proto import DataProto

    return DataProto.concat([batch] * times) if times > 1 else batch
