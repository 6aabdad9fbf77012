"""Dispatch by data-parallel rank (Dispatch.DP_MP_COMPUTE over a DataParallelLayout) with megatron's model
parallelism: the ranks of one TP × PP group get the same shard, the Cluster keeps one result per group.

The layout maths runs without processes for TP2 × PP2 × DP2 (8 ranks, megatron's rank order). The real
megatron_train runs TP2 × DP2, PP2 × DP2 and TP2 × PP2 with sequence parallelism (the pipeline's p2p shapes
hold 1/TP of the sequence) separately on 4 gloo ranks (8 processes are too many for this 2-core machine), its
shards split by the same functions the Cluster uses (harness.dispatched / collected), and must give the
unsharded plain-PyTorch run's training (the tolerances of test_megatron_train.py).
"""

import pytest
import torch

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import DataParallelLayout, Dispatch, collect_results, split_arguments
from tests.strategies import harness as h
from tests.strategies.test_megatron_train import LOSS_ATOL, LOSS_RTOL, PARAM_ATOL
from tests.strategies.test_train_strategies import LOSS_KEYS, _assert_steps_close, _log_probs, _max_param_diff

WORLD = 4
LAYOUTS = {  # name: strategy_config; micro 4 × accumulation 16 / (4 × DP) = the rows of each data-parallel shard
    "tp2_dp2": {"tensor_model_parallel_size": 2},
    "pp2_dp2": {"pipeline_model_parallel_size": 2},
    "tp2_pp2_sp": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "sequence_parallel": True},
}
PARALLEL = {"tp2_dp2": (2, 1, 2), "pp2_dp2": (1, 2, 2), "tp2_pp2_sp": (2, 2, 1)}  # (TP, PP, DP)


def megatron_reports(tp: int, pp: int, dp: int) -> list[dict]:
    """What MegatronInferStrategy.data_parallel_info reports per rank, in megatron-core's default rank order
    (tensor fastest, then data, then pipeline)."""
    reports = []
    for rank in range(tp * pp * dp):
        tp_rank, dp_rank, pp_rank = rank % tp, (rank // tp) % dp, rank // (tp * dp)
        reports.append({"dp_rank": dp_rank, "dp_size": dp, "collect": tp_rank == 0 and pp_rank == pp - 1})
    return reports


def shard_bytes(batch: DataProto, layout: DataParallelLayout) -> tuple[int, int]:
    """(bytes the Cluster sends: each data-parallel shard once, compacted; bytes the former dispatch moved:
    a world-size split, each rank's rows then all-gathered to its model-parallel peers)."""
    world = len(layout.dp_ranks)
    per_rank = split_arguments(Dispatch.DP_MP_COMPUTE, world, (batch,), {}, layout)
    shards = {id(args[0]): args[0] for args, _ in per_rank}
    now = sum(shard.compact().nbytes() for shard in shards.values())
    model_parallel = world // layout.dp_size
    before = sum(part.compact().nbytes() for part in batch.chunk(world)) * model_parallel
    return now, before


def test_tp2_pp2_dp2_layout_sends_each_row_to_one_group_and_collects_in_order():
    layout = DataParallelLayout.from_reports(megatron_reports(2, 2, 2), "actor_train")
    assert layout.dp_size == 2 and sum(layout.collect) == 2
    batch = DataProto.from_dict({"row": torch.arange(16)}, {"uid": [f"u{i}" for i in range(16)]})
    per_rank = [args[0] for args, _ in split_arguments(Dispatch.DP_MP_COMPUTE, 8, (batch,), {}, layout)]
    groups = {}
    for rank, shard in enumerate(per_rank):
        groups.setdefault(layout.dp_ranks[rank], []).append(shard.batch["row"].tolist())
    for dp_rank, shards in groups.items():
        assert all(rows == shards[0] for rows in shards), f"ranks of data-parallel group {dp_rank} differ"
    rows = [row for shards in groups.values() for row in shards[0]]
    assert sorted(rows) == list(range(16)) and len(rows) == 16  # every row in exactly one group
    # each rank answers with its rows (+100 × rank): only the collecting ranks' answers come back, in DP order
    answers = [DataProto.from_dict({"row": s.batch["row"] + 100 * r}) for r, s in enumerate(per_rank)]
    out = collect_results(Dispatch.DP_MP_COMPUTE, answers, layout)
    collectors = [rank for rank, keep in enumerate(layout.collect) if keep]
    assert collectors == [4, 6]  # tensor rank 0 of the last stage, dp 0 and 1
    assert out.batch["row"].tolist() == [r + 400 for r in range(8)] + [r + 600 for r in range(8, 16)]
    now, before = shard_bytes(h.as_proto(_rows(16)), layout)
    print(f"TP2×PP2×DP2, 16 rows: {now} bytes sent per call (was {before}: world-size split + all-gather)")
    assert now * 4 <= before  # TP × PP = 4 ranks used to receive each row (plus per-shard meta_info)


def _rows(count: int) -> dict:
    return {"input_ids": torch.arange(count * 16).view(count, 16), "response_mask": torch.ones(count, 8)}


@pytest.mark.parametrize(
    "reports,match",
    [
        ([{"dp_rank": 0, "dp_size": 1, "collect": True}, {"dp_rank": 0, "dp_size": 2, "collect": True}], "disagree"),
        ([{"dp_rank": 0, "dp_size": 1, "collect": True}] * 2, "exactly one collecting rank"),
        ([{"dp_rank": 0, "dp_size": 2, "collect": True}, {"dp_rank": 0, "dp_size": 2, "collect": False}], "0..1"),
    ],
)
def test_inconsistent_layouts_are_errors(reports, match):
    with pytest.raises(ValueError, match=match):
        DataParallelLayout.from_reports(reports, "actor_train")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.strategies import megatron_scenarios as ms

    ms.require_megatron()
    workdir = tmp_path_factory.mktemp("megatron_dp")
    model_dir, data_file = h.prepare(workdir)
    scenarios = [
        dict(name=name, strategy="megatron_train", config=config, micro=4, accumulation=4 // PARALLEL[name][2])
        for name, config in LAYOUTS.items()
    ]
    results = ms.launch(scenarios, model_dir, data_file, workdir, world_size=WORLD)
    return {
        "results": results,
        "reference": h.plain_reference(model_dir, data_file),
        "model_dir": model_dir,
        "data_file": data_file,
    }


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_model_and_data_parallel_equals_the_unsharded_run(runs, name):
    from transformers import AutoModelForCausalLM

    result, reference = runs["results"][name], runs["reference"]
    _assert_steps_close(result["steps"], reference["steps"], LOSS_KEYS, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    model.load_state_dict(reference["params"])
    expected = _log_probs(model, torch.load(runs["data_file"])[0])
    assert torch.allclose(torch.cat(result["log_probs"]), expected, atol=1e-4)  # 3 / 7 rows, one per group
    layout = result["layout"]  # as the 4 ranks reported it
    assert layout == DataParallelLayout.from_reports(megatron_reports(*PARALLEL[name]), name)
    first = torch.load(runs["data_file"])[0]["input_ids"]
    by_group = {}
    for rank, rows in enumerate(result["received"]):
        assert torch.equal(by_group.setdefault(layout.dp_ranks[rank], rows), rows)  # same rows within a group
    assert torch.equal(torch.cat([by_group[dp] for dp in range(layout.dp_size)]), first)  # each row in one group
    now, before = shard_bytes(h.as_proto(torch.load(runs["data_file"])[0]), layout)
    print(f"{name}: {result['seconds']:.0f} s; a training step's batch: {now} bytes sent (was {before})")
