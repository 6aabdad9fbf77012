"""The shipped config blocks are reachable from a config in any directory; the `profiler` blocks resolve per
role and refuse what cannot work (missing steps, steps past max_steps, nsys where it is not installed)."""

from pathlib import Path

import pytest
import yaml

from roll.configs import ConfigError, compose_config
from roll.configs.profiler import ProfilerConfig, RoleProfilerConfig, role_profile
from roll.pipeline.rlvr.config import load_rlvr_config

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny_rlvr"


def lone_config(tmp_path, defaults: list, **extra) -> str:
    """The demo YAML moved into a folder of its own, with nothing beside it (no ../config)."""
    data = yaml.safe_load((TINY / "rlvr_tiny.yaml").read_text())
    data["defaults"] = [*defaults, "_self_"]
    data.update(extra)
    folder = tmp_path / "somewhere" / "else"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(yaml.safe_dump(data))
    return str(folder)


def test_a_config_anywhere_reaches_the_shipped_blocks_by_name(tmp_path):
    folder = lone_config(tmp_path, ["/envs@_here_", "deepspeed_zero3@_here_"])  # with or without the root "/"
    config = load_rlvr_config(
        compose_config(folder, "mine", ["actor_train.strategy_args.strategy_config=${deepspeed_zero3}"])
    )
    assert config.actor_train.strategy_args.strategy_config["zero_optimization"]["stage"] == 3
    assert config.system_envs["OMP_NUM_THREADS"] == "1"


def test_an_included_config_reaches_the_shipped_blocks_from_the_root(tmp_path):
    """examples/custom_env includes ../agentic_demo/frozen_lake_traj, which includes /traj_envs and /envs."""
    base = Path(lone_config(tmp_path, ["/envs@_here_", "/deepspeed_zero2@_here_"]))
    (base.parent / "mine").mkdir()
    (base.parent / "mine" / "top.yaml").write_text("defaults:\n  - ../else/mine@_here_\n  - _self_\nseed: 7\n")
    config = load_rlvr_config(
        compose_config(
            str(base.parent / "mine"), "top", ["actor_train.strategy_args.strategy_config=${deepspeed_zero2}"]
        )
    )
    assert config.seed == 7 and config.actor_train.strategy_args.strategy_config["zero_optimization"]["stage"] == 2


def test_the_yamls_own_search_path_is_kept_and_searched_first(tmp_path):
    mine = tmp_path / "my_blocks"
    mine.mkdir()
    (mine / "deepspeed_zero3.yaml").write_text("deepspeed_zero3:\n  zero_optimization: {stage: 1}\n")
    folder = lone_config(tmp_path, ["envs@_here_", "deepspeed_zero3@_here_"], hydra={"searchpath": [f"file://{mine}"]})
    composed = compose_config(folder, "mine", [])
    assert composed.deepspeed_zero3.zero_optimization.stage == 1  # the user's block shadows the shipped one
    assert composed.system_envs.OMP_NUM_THREADS == "1"  # the shipped blocks are still found


def test_a_missing_block_names_the_search_path(tmp_path):
    folder = lone_config(tmp_path, ["deepspeed_zero9@_here_"])
    with pytest.raises(ConfigError, match="(?s)deepspeed_zero9.*pkg://roll.configs.blocks"):
        compose_config(folder, "mine", [])


def tiny(*overrides):
    return load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", list(overrides)))


def test_role_profiler_blocks_override_the_pipeline_key_by_key():
    pipeline = ProfilerConfig(tool="torch", steps=[1, 2], save_path=None)
    assert role_profile(pipeline, None, "out/") == {
        "tool": "torch",
        "steps": [1, 2],
        "ranks": [0],
        "all_ranks": False,
        "save_path": "out/profile",
    }
    own = role_profile(pipeline, RoleProfilerConfig(tool="torch_memory", all_ranks=True), "out")
    assert (own["tool"], own["steps"], own["all_ranks"]) == ("torch_memory", [1, 2], True)
    assert role_profile(pipeline, RoleProfilerConfig(enable=False), "out") is None
    assert role_profile(ProfilerConfig(), None, "out") is None  # no tool anywhere: off
    assert role_profile(ProfilerConfig(), RoleProfilerConfig(tool="torch", steps=[3]), "out")["steps"] == [3]


def test_profiler_without_steps_or_with_steps_past_max_steps_is_refused():
    with pytest.raises(ConfigError, match=r"no steps are given.*profiler.steps"):
        tiny("profiler.tool=torch")
    with pytest.raises(ConfigError, match=r"'actor_train' profiler steps \[61\].*max_steps=60"):
        tiny("+actor_train.profiler={tool: torch, steps: [61]}")
    assert tiny("profiler.tool=torch", "profiler.steps=[1,60]").profiler.steps == [1, 60]


def test_nsys_is_refused_at_config_time_where_nsys_is_not_installed(monkeypatch):
    import roll.configs.profiler as profiler

    monkeypatch.setattr(profiler.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"'profiler.tool' = 'nsys'.*not installed.*no `nsys` on PATH"):
        tiny("profiler.tool=nsys", "profiler.steps=[1]")
    with pytest.raises(ConfigError, match=r"'actor_infer.profiler.tool' = 'nsys'"):
        tiny("+actor_infer.profiler={tool: nsys, steps: [1]}")
    monkeypatch.setattr(profiler.shutil, "which", lambda name: f"/opt/nsight/bin/{name}")
    assert tiny("profiler.tool=nsys", "profiler.steps=[1]").profiler.tool == "nsys"
