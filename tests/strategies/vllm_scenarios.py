"""The vLLM strategy checks, run in one child process (`python -m tests.strategies.vllm_scenarios OUT.json`).

A child process because vLLM's CPU worker binds OpenMP threads and replaces `torch.set_num_threads` for
the whole process; the rest of the test session must not inherit that. One process for all the scenarios
(each with its own engine): starting Python with vLLM is most of a scenario's time. Results go to a JSON
file that tests/strategies/test_vllm.py (scenarios `untied`, `tied`) and test_vllm_requests.py (`requests`)
assert on, through the session fixture `vllm_results` (conftest.py); every scenario records its error instead
of stopping the rest.

The strategies run as they do in an ActorWorker, behind `StandInWorker` (a test double carrying what a
strategy reads: worker_config, rank, world_size). `RoleDouble` stands in for a one-worker Cluster with the
ActorWorker methods the pipeline's WeightSync calls, so the real roll/pipeline/core/weight_sync.py checks
(parameter checksum + probe log-probs) run unchanged.
"""

import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

PROMPT_LENGTH, RESPONSE_LENGTH, N = 8, 8, 4
WORDS = [f"w{i}" for i in range(150)] + ["the answer is", "\\boxed{7}", "add", "two", "numbers"]


@dataclass
class StandInWorker:  # test double for roll.distributed.worker.Worker: what strategies read
    worker_config: object
    rank: int = 0
    world_size: int = 1


def transfer_worker(strategy):
    """The real weight-transfer methods of ActorWorker (roll.workers.weight_sync_worker) on one in-process
    worker; an inference strategy standing in as the trainer exports its module's parameters."""
    import logging

    from roll.workers.weight_sync_worker import WeightTransferMixin

    worker = WeightTransferMixin()
    worker.strategy = strategy
    if not hasattr(strategy, "named_hf_parameters"):
        worker.strategy = SimpleNamespace(
            named_hf_parameters=lambda: strategy.model.named_parameters(), load_weights=strategy.load_weights
        )
    worker.rank, worker.worker_name, worker.master_addr = 0, "double", None
    worker.logger = logging.getLogger("double")
    return worker


class RoleDouble:
    """One-worker stand-in for a Cluster of ActorWorkers (same method names, list results for ONE_TO_ALL)."""

    def __init__(self, strategy):
        self.strategy, self.worker_config, self.world_size = strategy, strategy.config, 1
        self.transfer = transfer_worker(strategy)

    def __getattr__(self, name):  # WeightSync's transfer calls (open_weight_stream, receive_weight_bucket, ...)
        method = getattr(self.__dict__["transfer"], name)
        return lambda *args, **kwargs: [method(*args, **kwargs)]

    def generate(self, batch):
        return self.strategy.generate(batch, batch.meta_info.get("generation_config", {}))

    def compute_log_probs(self, batch):
        from roll.distributed.data_proto import DataProto

        return DataProto.from_dict(tensors={"log_probs": self.strategy.compute_log_probs(batch)})

    def get_weights(self):
        return [{name: p.detach().clone() for name, p in self.strategy.model.named_parameters()}]

    def load_weights(self, weights):
        self.strategy.load_weights(weights.items())

    def state_checksum(self):
        return [self.strategy.state_checksum()]


def worker_config(model_dir, strategy_name, strategy_config=None):
    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig

    return WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(model_dir), dtype="float32"),
        generating_args=GeneratingArgs(max_new_tokens=RESPONSE_LENGTH, num_return_sequences=N),
        strategy_args=StrategyArgs(strategy_name=strategy_name, strategy_config=strategy_config),
        world_size=1,
        infer_batch_size=16,
    )


def make(model_dir, strategy_name, strategy_config=None):
    from roll.strategies import create_strategy

    strategy = create_strategy(strategy_name, StandInWorker(worker_config(model_dir, strategy_name, strategy_config)))
    strategy.initialize()
    return strategy


def prompt_batch(vocab: int, rows: int = 6, seed: int = 0):
    """Left-padded prompts of 3..PROMPT_LENGTH tokens (ids ≥ 4: no special tokens), with uids."""
    import numpy as np

    from roll.distributed.data_proto import DataProto
    from roll.utils.functional import compute_position_ids

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, PROMPT_LENGTH + 1, (rows,), generator=generator)
    mask = (torch.arange(PROMPT_LENGTH) >= PROMPT_LENGTH - lengths[:, None]).long()
    prompts = torch.randint(4, vocab, (rows, PROMPT_LENGTH), generator=generator) * mask
    return DataProto.from_dict(
        tensors={"prompts": prompts, "attention_mask": mask, "position_ids": compute_position_ids(mask)},
        non_tensors={"uid": np.array([f"p{i}" for i in range(rows)], dtype=object)},
    )


def perturbed_copy(source: Path, target: Path, seed: int, scale: float = 0.3, eos_often: bool = False) -> Path:
    """The same architecture with different weights: the 'trained' model the trainer would send.
    `eos_often` points the (untied) output row of EOS along the mean final hidden state, so that some
    samples stop early and the EOS/padding layout is exercised."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(scale * param.std().clamp(min=0.02) * torch.randn(param.shape, generator=generator))
        if eos_often:
            tokens = torch.randint(4, model.config.vocab_size, (16, 12), generator=generator)
            hidden = model(tokens, output_hidden_states=True).hidden_states[-1].reshape(-1, model.config.hidden_size)
            direction = hidden.mean(0) / hidden.mean(0).norm()
            top_other = (hidden @ model.lm_head.weight.T).max(-1).values.mean()
            model.lm_head.weight[model.config.eos_token_id] = (
                direction * (top_other + 0.5) / (hidden @ direction).mean()
            )
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)
    return target


def weight_sync(trainer, engine):
    """The pipeline's WeightSync on the doubles (no devices: the object-store path, handed over in-process)."""
    from roll.pipeline.core import weight_sync as module

    probe = prompt_batch(trainer.strategy.model.config.vocab_size, rows=1, seed=123)
    return module.WeightSync(trainer, engine, probe), module.WeightSyncError


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


# --- scenarios ------------------------------------------------------------------------------------------------
def untied(workdir: Path) -> dict:
    """Dummy-loaded engine + initial sync; greedy identity with hf_infer; log-probs; n>1 layout; seeds."""
    from roll.demo.tiny_model import build_tiny_model

    base = build_tiny_model(str(workdir / "untied"), WORDS, seed=3)
    trained = perturbed_copy(base, workdir / "untied_trained", seed=1, eos_often=True)
    out = {}
    # a small token budget: the 24-request batches need several scheduler steps (as the demo's 256 rows do)
    engine = make(
        base,
        "vllm",
        {"load_format": "dummy", "max_model_len": 64, "max_num_batched_tokens": 64, "model_update_buffer_size_mb": 0.1},
    )
    hf = make(trained, "hf_infer")
    vocab = hf.model.config.vocab_size
    batch = prompt_batch(vocab)
    try:
        engine.generate(batch, {})
        out["dummy_generate_error"] = None
    except RuntimeError as error:
        out["dummy_generate_error"] = str(error)
    sync, _ = weight_sync(RoleDouble(hf), RoleDouble(engine))
    started = time.perf_counter()
    out["sync"] = sync.sync_and_verify(step=0)
    out["sync_seconds"] = time.perf_counter() - started
    out["checksums"] = [engine.state_checksum(), hf.state_checksum()]

    greedy = {"do_sample": False, "num_return_sequences": 1}
    batch.meta_info["seed"] = 7
    v_greedy, h_greedy = engine.generate(batch, greedy), hf.generate(batch, greedy)
    out["greedy_identical"] = bool(torch.equal(v_greedy.batch["responses"], h_greedy.batch["responses"]))
    out["greedy_mask_identical"] = bool(torch.equal(v_greedy.batch["response_mask"], h_greedy.batch["response_mask"]))
    out["greedy_lengths"] = v_greedy.batch["response_mask"].sum(1).tolist()
    out["greedy_lp_diff_vs_hf_infer"] = max_diff(
        v_greedy.batch["rollout_log_probs"], h_greedy.batch["rollout_log_probs"]
    )

    out["stop_strings"] = stop_strings_check(engine, base, batch, v_greedy, greedy)

    for temperature in (1.0, 0.5):
        batch.meta_info["seed"] = 11
        sampled = engine.generate(batch, {"temperature": temperature})
        scored = sampled.select(
            batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
        )
        scored.meta_info["temperature"] = temperature
        out[f"rollout_vs_hf_forward_T{temperature}"] = max_diff(
            sampled.batch["rollout_log_probs"], hf.compute_log_probs(scored)
        )
        out[f"layout_T{temperature}"] = layout_checks(batch, sampled, engine.pad_token_id, engine.eos_token_id)
        if temperature == 1.0:
            out["vllm_forward_vs_hf_forward"] = max_diff(engine.compute_log_probs(scored), hf.compute_log_probs(scored))
            try:
                scored.meta_info["temperature"] = 0.7
                engine.compute_log_probs(scored)
                out["temperature_error"] = None
            except ValueError as error:
                out["temperature_error"] = str(error)

    batch.meta_info["seed"] = 11
    again = engine.generate(batch, {})
    batch.meta_info["seed"] = 12
    other = engine.generate(batch, {})
    first = engine.generate(batch, {})  # seed 12 again
    out["seed_repeat_identical"] = bool(torch.equal(other.batch["responses"], first.batch["responses"]))
    out["seed_change_differs"] = not torch.equal(again.batch["responses"], other.batch["responses"])
    return out


def stop_strings_check(engine, model_dir: Path, batch, greedy_out, greedy: dict) -> dict:
    """generating_args.stop_strings: each greedy reply ends at the token whose text completes the string."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    lengths = greedy_out.batch["response_mask"].sum(1).long().tolist()
    replies = [greedy_out.batch["responses"][i, :n].tolist() for i, n in enumerate(lengths)]
    longest = max(range(len(replies)), key=lambda i: len(replies[i]))
    word = tokenizer.decode(replies[longest][2:3], skip_special_tokens=True).strip()
    text = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    expected = [ids[: next((k for k in range(1, len(ids) + 1) if word in text(ids[:k])), len(ids))] for ids in replies]
    stopped = engine.generate(batch, {**greedy, "stop_strings": [word]})
    got_lengths = stopped.batch["response_mask"].sum(1).long().tolist()
    got = [stopped.batch["responses"][i, :n].tolist() for i, n in enumerate(got_lengths)]
    return {
        "word": word,
        "identical": got == expected,
        "shortened": sum(len(e) < len(r) for e, r in zip(expected, replies)),
        "got": got,
        "expected": expected,
    }


def layout_checks(batch, sampled, pad: int, eos: int) -> dict:
    from roll.utils.functional import compute_position_ids

    rows = len(batch)
    responses, mask = sampled.batch["responses"], sampled.batch["response_mask"]
    groups = responses.view(rows, N, RESPONSE_LENGTH)
    lengths = mask.sum(dim=1).long()
    ends_right = all(  # a response shorter than RESPONSE_LENGTH ends with EOS; pad after it, mask 0 there
        (length == RESPONSE_LENGTH or responses[row, length - 1].item() == eos)
        and bool((responses[row, length:] == pad).all())
        and bool((mask[row, :length] == 1).all())
        for row, length in enumerate(lengths.tolist())
    )
    return {
        "rows": len(sampled),
        "expected_rows": rows * N,
        "prompts_adjacent": bool(torch.equal(sampled.batch["prompts"], batch.batch["prompts"].repeat_interleave(N, 0))),
        "uids_adjacent": sampled.non_tensor_batch["uid"].tolist()
        == [u for u in batch.non_tensor_batch["uid"] for _ in range(N)],
        "samples_differ_within_group": all(len({tuple(r.tolist()) for r in group}) > 1 for group in groups),
        "input_ids_ok": bool(
            torch.equal(sampled.batch["input_ids"], torch.cat([sampled.batch["prompts"], responses], 1))
        ),
        "attention_mask_ok": bool(torch.equal(sampled.batch["attention_mask"][:, PROMPT_LENGTH:], mask.long())),
        "position_ids_ok": bool(
            torch.equal(sampled.batch["position_ids"], compute_position_ids(sampled.batch["attention_mask"]))
        ),
        "right_padded_up_to_eos": ends_right,
        "log_probs_zero_on_padding": bool((sampled.batch["rollout_log_probs"][mask == 0] == 0).all()),
        "log_probs_negative_on_tokens": bool((sampled.batch["rollout_log_probs"][mask == 1] < 0).all()),
        "some_stopped_at_eos": bool((lengths < RESPONSE_LENGTH).any()),
        "some_full_length": bool((lengths == RESPONSE_LENGTH).any()),
    }


def tied(workdir: Path) -> dict:
    """The stale output layer of tied embeddings: a skipped sync and a reload without re-processing the
    tied layer must both fail the pipeline's verification; the strategy's re-processing passes it."""
    from roll.demo.tiny_model import build_tiny_model

    base = build_tiny_model(str(workdir / "tied"), WORDS, seed=4, tie_word_embeddings=True)
    trained = perturbed_copy(base, workdir / "tied_trained", seed=2, scale=1.0)
    # chunked prefill on: per-request seeds are off on CPU, the process RNG is seeded instead
    engine = make(base, "vllm", {"max_model_len": 64, "enable_chunked_prefill": True, "max_num_batched_tokens": 32})
    hf = make(trained, "hf_infer")
    assert hf.model.config.tie_word_embeddings and "lm_head.weight" not in dict(hf.model.named_parameters())
    sync, error_type = weight_sync(RoleDouble(hf), RoleDouble(engine))
    out = {}

    def verify(label):
        """Both checks of WeightSync, each on its own, so the test sees which ones fire; the checksum compares
        the engine with what the trainer sends (fp32 both: its state checksum)."""
        checks = {"_check_checksums": lambda: sync._check_checksums(5, [hf.state_checksum()]), "_check_probe": None}
        for check, call in checks.items():
            try:
                value = call() if call else sync._check_probe(step=5)
                out[f"{label}{check}"] = {"passed": True, "value": value}
            except error_type as error:
                out[f"{label}{check}"] = {"passed": False, "error": str(error)}
        batch = prompt_batch(hf.model.config.vocab_size, seed=5)
        greedy = {"do_sample": False, "num_return_sequences": 1}
        out[f"{label}_greedy_identical"] = bool(
            torch.equal(
                engine.generate(batch, greedy).batch["responses"], hf.generate(batch, greedy).batch["responses"]
            )
        )

    verify("skipped")  # the trainer moved on, the engine never received the weights
    fix = engine._refresh_tied_layers
    engine._refresh_tied_layers = lambda: 0  # vLLM's plain reload: the output layer's packed copy stays stale
    engine.load_weights(RoleDouble(hf).get_weights()[0].items())
    verify("stale")
    try:
        sync.sync_and_verify(step=5)
        out["stale_sync_and_verify"] = "passed"
    except error_type as error:
        out["stale_sync_and_verify"] = str(error)
    engine._refresh_tied_layers = fix
    try:
        out["fixed_sync"] = sync.sync_and_verify(step=6)
    except error_type as error:
        out["fixed_sync"] = {"error": str(error)}
    verify("fixed")
    out["offload_reload"] = offload_reload(engine, hf)
    out["request_seeds"] = engine.request_seeds
    batch = prompt_batch(hf.model.config.vocab_size, seed=6)
    runs = []
    for seed in (3, 3, 4):
        batch.meta_info["seed"] = seed
        runs.append(engine.generate(batch, {}).batch["responses"])
    out["chunked_seed_repeat_identical"] = bool(torch.equal(runs[0], runs[1]))
    out["chunked_seed_change_differs"] = not torch.equal(runs[0], runs[2])
    return out


def requests(workdir: Path) -> dict:
    """Request-level generation (LLMEngine.add_request / step) matches hf_infer's batched greedy; abort works."""
    from roll.demo.tiny_model import build_tiny_model

    base = build_tiny_model(str(workdir / "requests"), WORDS, seed=3)
    trained = perturbed_copy(base, workdir / "requests_trained", seed=1, eos_often=True)
    engine = make(trained, "vllm", {"max_model_len": 64})
    hf = make(trained, "hf_infer")
    batch = prompt_batch(hf.model.config.vocab_size, rows=4, seed=5)
    greedy = hf.generate(batch, {"do_sample": False, "num_return_sequences": 1})
    out = {"greedy_identical": [], "greedy_lp_diff": 0.0, "reasons": []}
    for row in range(4):
        ids = batch.batch["prompts"][row][batch.batch["attention_mask"][row].bool()].tolist()
        result = engine.generate_request(f"g{row}", ids, {"do_sample": False})
        length = int(greedy.batch["response_mask"][row].sum())
        out["greedy_identical"].append(result.token_ids == greedy.batch["responses"][row, :length].tolist())
        diff = (torch.tensor(result.log_probs) - greedy.batch["rollout_log_probs"][row, :length]).abs().max().item()
        out["greedy_lp_diff"] = max(out["greedy_lp_diff"], diff)
        out["reasons"].append([result.finish_reason, result.token_ids[-1] == engine.eos_token_id])
    out["seed_repeat"] = (
        engine.generate_request("s1", ids, {"seed": 5, "max_new_tokens": 8}).token_ids
        == engine.generate_request("s2", ids, {"seed": 5, "max_new_tokens": 8}).token_ids
    )
    out["abort_unknown"] = engine.abort_request("nope")
    # several requests in one call (continuous batching): each as if alone
    prompts = [batch.batch["prompts"][r][batch.batch["attention_mask"][r].bool()].tolist() for r in range(4)]
    together = engine.generate_requests([(f"b{r}", p, {"do_sample": False}) for r, p in enumerate(prompts)])
    alone = [engine.generate_request(f"a{r}", p, {"do_sample": False}) for r, p in enumerate(prompts)]
    out["batched_identical"] = [t.token_ids == a.token_ids for t, a in zip(together, alone)]
    out["batched_order"] = [t.request_id for t in together]

    llm_engine = engine.llm.llm_engine
    real_step, steps = llm_engine.step, []

    def step():  # abort from "another caller" after the engine has produced 3 outputs for the request
        outputs = real_step()
        steps.append(1)
        if len(steps) == 3:
            out["abort_in_flight"] = engine.abort_request("long")
        return outputs

    llm_engine.step = step
    try:
        aborted = engine.generate_request("long", ids, {"max_new_tokens": 40, "seed": 2})
    finally:
        llm_engine.step = real_step
    out["aborted"] = {
        "reason": aborted.finish_reason,
        "tokens": len(aborted.token_ids),
        "log_probs": len(aborted.log_probs),
    }
    steps.clear()
    llm_engine.step = step  # the same abort of "long", now one of two requests of a call: "short" runs on
    try:
        pair = engine.generate_requests(
            [("long", ids, {"max_new_tokens": 40, "seed": 2}), ("short", ids, {"do_sample": False})]
        )
    finally:
        llm_engine.step = real_step
    out["pair"] = [[r.finish_reason, len(r.token_ids)] for r in pair]
    out["pair_short_identical"] = pair[1].token_ids == alone[-1].token_ids
    out["abort_after_finish"] = engine.abort_request("long")
    out["engine_idle_after_abort"] = not llm_engine.has_unfinished_requests()
    after = engine.generate_request("after", ids, {"do_sample": False})  # the engine is still usable
    out["after_abort_identical"] = (
        after.token_ids == engine.generate_request("after2", ids, {"do_sample": False}).token_ids
    )
    return out


def offload_reload(engine, hf) -> str:
    engine.offload()
    engine.reload()
    batch = prompt_batch(hf.model.config.vocab_size, seed=9)
    greedy = {"do_sample": False, "num_return_sequences": 1}
    same = torch.equal(engine.generate(batch, greedy).batch["responses"], hf.generate(batch, greedy).batch["responses"])
    return "ok" if same else "outputs changed after offload/reload"


def main(out_file: str) -> None:
    torch.set_num_threads(1)
    out_path = Path(out_file)
    workdir = out_path.parent
    results = {}
    for name, scenario in (("untied", untied), ("tied", tied), ("requests", requests)):
        started = time.perf_counter()
        try:
            results[name] = scenario(workdir)
        except Exception:  # noqa: BLE001 — recorded; the test prints it
            results[name] = {"error": traceback.format_exc()}
        results[name]["seconds"] = time.perf_counter() - started
        print(f"scenario {name}: {results[name]['seconds']:.1f} s", flush=True)
    out_path.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
