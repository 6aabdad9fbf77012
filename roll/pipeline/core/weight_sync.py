"""actor_train → actor_infer weight sync, in buckets, in actor_infer's dtype, verified by a policy.

Transfer: the trainer's HF-named weights go in buckets of at most `model_update_buffer_size_mb` (a
larger single tensor goes alone), so a sync needs one bucket of extra memory, not the whole model. The
driver only moves references; the bytes go worker to worker (roll.workers.weight_sync_worker) by one of:
  object_store  Ray's object store (any placement; the fallback)
  collective    a broadcast group of trainer rank 0 + every inference worker (separate devices)
  ipc           shared memory between workers on the same device ids (colocated)
`auto` picks ipc when every inference worker shares a device with a trainer worker, collective when
no device is shared, else object_store; the choice is logged once.

The trainer sends floating tensors in the dtype actor_infer serves (model_args.dtype: with bf16 and fp32
master weights the engine gets the bf16 rounding it would make itself) and sums what it sends.

Checks (either mismatch stops the run): a checksum of what was sent, in the dtype it was sent, against
one of what the engine serves (catches a skipped, partial or stale load; vLLM's reads its kernels' own
copies) and the log-probs of a fixed probe (prompt + greedy response) under both roles (catches an engine
that computes with other weights than it holds). Which run after a step's sync is the policy
(`weight_sync_check`, `weight_sync_full_check_steps`); the sync at start-up, after a resume and after a
recovery is always checked in full.
"""

import time

from roll.distributed.resource_manager import plan_role
from roll.utils.logging import get_logger

logger = get_logger("roll.weight_sync")

CHECKSUM_RTOL = 1e-6
# fp32 forward passes of the same weights in two engines agree to ~1e-6; bf16 needs far more room.
PROBE_TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2, "float16": 5e-2}
METHODS = ("auto", "object_store", "collective", "ipc")
CHECKS = ("full", "checksum", "off")  # weight_sync_check: checksums + probe, checksums only, nothing
DEFAULT_BUFFER_MB = 1024.0


class WeightSyncError(RuntimeError):
    pass


def choose_method(requested: str, train_config, infer_config) -> tuple[str, dict, str]:
    """(method, inference rank → serving trainer rank, why). A colocated inference worker is served by the
    trainer rank on its device (every trainer rank holds the full bucket); otherwise trainer rank 0 serves."""
    if requested not in METHODS:
        raise ValueError(f"weight_sync_method = {requested!r}; valid: {list(METHODS)}")
    train = [set(p.devices) for p in _placements(train_config)]
    infer = [set(p.devices) for p in _placements(infer_config)]
    serving = {
        rank: next((t for t, devices in enumerate(train) if devices & mine), 0) for rank, mine in enumerate(infer)
    }
    colocated = all(any(devices & mine for devices in train) for mine in infer)
    separate = all(train) and all(infer) and not any(t & i for t in train for i in infer)
    if requested != "auto":
        method, why = requested, "set by weight_sync_method"
    elif colocated:
        method, why = "ipc", "every actor_infer worker shares a device with an actor_train worker"
    elif separate:
        method, why = "collective", "actor_train and actor_infer use separate devices"
    else:
        method, why = "object_store", "actor_infer is neither fully colocated with actor_train nor separate from it"
    return method, serving if method == "ipc" else {rank: 0 for rank in serving}, why


def _placements(config):
    return plan_role(config.name, config.device_mapping, config.num_gpus_per_worker, config.world_size or 1)


class WeightSync:
    def __init__(
        self,
        actor_train,
        actor_infer,
        probe_prompt,
        buffer_size_mb: float = DEFAULT_BUFFER_MB,
        method: str = "auto",
        adapter_only: bool = False,
        check: str = "full",
        full_check_steps: int = 0,
    ):
        """`adapter_only` (lora_weight_sync: adapter): send the LoRA adapter matrices, which actor_infer
        serves on its base weights (load_adapter), instead of the merged weights; the checksum then compares
        adapters, and the probe still compares what both roles compute. `check`, `full_check_steps`: the
        verification of a step's sync (check_for_step)."""
        if check not in CHECKS:
            raise ValueError(f"weight_sync_check = {check!r}; valid: {list(CHECKS)}")
        if full_check_steps < 0:
            raise ValueError(f"weight_sync_full_check_steps = {full_check_steps}: must be >= 0 (0 = never)")
        self.actor_train, self.actor_infer = actor_train, actor_infer
        self.adapter_only = adapter_only
        self.check, self.full_check_steps = check, full_check_steps
        self.probe_prompt = probe_prompt
        self.dtype = actor_infer.worker_config.model_args.dtype
        self.tolerance = PROBE_TOLERANCE[self.dtype]
        if not buffer_size_mb > 0:
            raise ValueError(f"model_update_buffer_size_mb = {buffer_size_mb}: must be > 0")
        self.limit_bytes = buffer_size_mb * 2**20
        self.method, self.serving, why = choose_method(method, actor_train.worker_config, actor_infer.worker_config)
        self.timeout_s = actor_infer.worker_config.rpc_timeout
        self.group_ready = False
        self.group_members: list[dict] = []  # collective: each member's group rank, store address, own address
        self.passed_once = False
        self.last_buckets: list[dict] = []  # per bucket of the last sync: tensors, bytes, largest tensor
        logger.info("weight sync: %s (%s), buckets of at most %g MB", self.method, why, buffer_size_mb)

    def check_for_step(self, step: int, initial: bool = False) -> str:
        """The check (full, checksum or off) of the sync after 0-based `step`. `initial`: the sync at start-up,
        after a resume or a recovery (always full: the engine's weights came from somewhere else)."""
        if initial or self.check == "full":
            return "full"
        if self.full_check_steps and (step + 1) % self.full_check_steps == 0:
            return "full"
        return self.check

    def sync_and_verify(self, step: int, initial: bool = False) -> dict:
        check = self.check_for_step(step, initial)
        started = time.perf_counter()
        self.last_buckets, sent = self._transfer(step, checksum=check != "off")
        seconds = time.perf_counter() - started
        if check != "off":
            self._check_checksums(step, sent)
        probe_diff = self._check_probe(step) if check == "full" else None
        size = sum(b["bytes"] for b in self.last_buckets)
        if check == "full":
            verdict = (
                f"check passed ({check}): actor_infer holds the trained weights (checksums equal, probe log-probs "
                f"within {probe_diff:.3g} of actor_train's, tolerance {self.tolerance:g})"
            )
        elif check == "checksum":
            verdict = f"check passed ({check}): actor_infer holds the trained weights (checksums equal)"
        else:
            verdict = "not verified (weight_sync_check: off)"
        # in full once (the start-up sync); afterwards the progress line's "sync ok" says it (a failure raises)
        log = logger.debug if self.passed_once else logger.info
        self.passed_once = True
        log(
            "weight sync %s after step %d; %.1f MB as %s in %.2f s",
            verdict,
            step + 1,
            size / 2**20,
            self.dtype,
            seconds,
        )
        metrics = {
            "weight_sync/seconds": seconds,
            "weight_sync/size_mb": size / 2**20,
            "weight_sync/buckets": len(self.last_buckets),
            "weight_sync/max_bucket_mb": max((b["bytes"] for b in self.last_buckets), default=0) / 2**20,
            "weight_sync/checked": {"off": 0, "checksum": 1, "full": 2}[check],
        }
        if probe_diff is not None:
            metrics["weight_sync/probe_max_abs_diff"] = probe_diff
        return metrics

    def _transfer(self, step: int, checksum: bool = True) -> tuple[list[dict], list]:
        """Buckets sent, and each trainer rank's checksum of what it sent (None where it served nobody)."""
        train, infer = self.actor_train, self.actor_infer
        if self.method == "collective" and not self.group_ready:
            self._create_group()
        adapter_config = train.adapter_config()[0] if self.adapter_only else None
        infer.begin_weight_update(self.serving, self.timeout_s, adapter_config)
        sent, finished = [], False
        try:
            train.open_weight_stream(
                self.method,
                self.limit_bytes,
                sorted(set(self.serving.values())),
                self.adapter_only,
                self.dtype,
                checksum,
            )
            while True:
                payloads = train.next_weight_bucket()
                if payloads[0] is None:
                    break
                sent.append({k: payloads[0][k] for k in ("tensors", "bytes", "largest")})
                if self.method == "collective":
                    receiving = infer.receive_weight_bucket.submit(payloads)
                    train.broadcast_weight_bucket()
                    receiving.result()
                else:
                    infer.receive_weight_bucket(payloads)
            received = infer.finish_weight_update()
            finished = True
            sent_checksums = train.sent_weights_checksum() if checksum else []
        finally:
            try:
                train.close_weight_stream()
            finally:
                if not finished:
                    infer.abort_weight_update()
        total = sum(b["bytes"] for b in sent)
        for rank, got in enumerate(received):
            if got["bytes"] != total:
                raise WeightSyncError(
                    f"step {step + 1}: actor_infer rank {rank} loaded {got['bytes']} bytes of weights, "
                    f"actor_train sent {total}"
                )
        return sent, sent_checksums

    def _create_group(self) -> None:
        """trainer rank 0 + every inference worker; both sides must join at once (each call is bounded)."""
        host, port = self.actor_train.weight_group_address()
        world = 1 + self.actor_infer.world_size
        joins = [
            self.actor_train.join_weight_group.submit(host, port, world, self.timeout_s, True),
            self.actor_infer.join_weight_group.submit(host, port, world, self.timeout_s, False),
        ]
        members = [member for call in joins for member in call.result() if member]
        self.group_ready = True
        self.group_members = sorted(members, key=lambda m: m["rank"])
        logger.info(
            "weight sync: collective group of %d ranks at %s:%d (members: %s)",
            world,
            host,
            port,
            ", ".join(f"rank {m['rank']} on {m['local_ip']}" for m in self.group_members),
        )

    def _check_checksums(self, step: int, sent: list) -> None:
        """`sent`: each trainer rank's checksum of the tensors it sent, in the dtype it sent them; every
        inference rank must serve exactly that (its serving rank's)."""
        served = self.actor_infer.adapter_checksum() if self.adapter_only else self.actor_infer.state_checksum()
        what = "adapter" if self.adapter_only else "parameter"
        for rank, got in enumerate(served):
            expected = sent[self.serving[rank]]
            if abs(got - expected) > CHECKSUM_RTOL * max(abs(expected), 1.0):
                raise WeightSyncError(
                    f"step {step + 1}: after weight sync actor_infer rank {rank} serves {what} checksum {got!r}, "
                    f"actor_train sent {expected!r} ({self.dtype}): the inference engine did not load the "
                    f"trained weights"
                )

    def _check_probe(self, step: int) -> float:
        probe = self.probe_prompt
        probe.meta_info.update(generation_config={"num_return_sequences": 1, "do_sample": False}, seed=0)
        world = self.actor_infer.world_size
        generated = self.actor_infer.generate(_repeat_rows(probe, world))
        train_world = self.actor_train.world_size
        view = generated.select(
            batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        )
        view.meta_info["temperature"] = 1.0
        infer_lp = self.actor_infer.compute_log_probs(_repeat_rows(view[[0]], world)).batch["log_probs"][0]
        train_lp = self.actor_train.compute_log_probs(_repeat_rows(view[[0]], train_world)).batch["log_probs"][0]
        diff = (infer_lp - train_lp).abs().max().item()
        if diff > self.tolerance:
            raise WeightSyncError(
                f"step {step + 1}: probe log-probs differ by {diff:.3g} between actor_infer and actor_train "
                f"(tolerance {self.tolerance:g}): the inference engine is computing with stale or wrong weights"
            )
        return diff


def _repeat_rows(batch, times: int):
    from roll.distributed.data_proto import DataProto

    return DataProto.concat([batch] * times) if times > 1 else batch
