"""A ROLL user's first hour (issue 31, part 4): what a first config of one's own runs into, caught by --dry_run
with a message that says what to do."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from roll.configs import ConfigError, compose_config
from roll.pipeline.rlvr.config import load_rlvr_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = EXAMPLES / "tiny_rlvr"


def launcher():
    spec = importlib.util.spec_from_file_location("launcher", EXAMPLES / "start_rlvr_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(capsys, *args) -> tuple[int, str, str]:
    code = launcher().main(["--dry_run", *args])
    out, err = capsys.readouterr()
    return code, out, err


def tiny(*overrides):
    return load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", list(overrides)))


def rows_file(path: Path, tags) -> str:
    path.write_text("".join(json.dumps({"prompt": "1+1?", "ground_truth": "2", "tag": t}) + "\n" for t in tags))
    return str(path)


# ---- tag routing: ROLL's meaning (a domain takes only the tags it lists), checked by --dry_run --------------
def test_dry_run_refuses_a_tag_that_no_domain_lists(tmp_path, capsys):
    """rewards.math without tag_included and data tagged 'math' passed --dry_run and failed in the run."""
    data = rows_file(tmp_path / "train.jsonl", ["math", "math"])
    code, _, err = dry_run(
        capsys, f"actor_train.data_args.file_name={data}", "rewards.math.tag_included=[]", "validation=null"
    )
    assert code == 2
    assert f"actor_train.data_args {data} row 0: tag 'math' is in no rewards.<domain>.tag_included" in err
    assert "rewards.math.tag_included: [math]" in err and "as in ROLL" in err


def test_dry_run_routes_untagged_rows_to_a_lone_domain_and_listed_tags(tmp_path, capsys):
    untagged = rows_file(tmp_path / "untagged.jsonl", [None, None])
    few = "allow_repeated_prompts_in_step=true"  # 1-2 rows for a step of 32 prompts: not what is tested here
    code, _, err = dry_run(
        capsys, f"actor_train.data_args.file_name={untagged}", "rewards.math.tag_included=[]", "validation=null", few
    )
    assert code == 0, err
    tagged = rows_file(tmp_path / "tagged.jsonl", ["math"])
    assert dry_run(capsys, f"actor_train.data_args.file_name={tagged}", "validation=null", few)[0] == 0


def test_the_docs_say_what_the_code_does():
    doc = (EXAMPLES.parent / "docs" / "configuration.md").read_text()
    line = next(row for row in doc.splitlines() if row.startswith("| `tag_included`"))
    assert "every row" not in line and "takes only the tags it lists" in line


# ---- track_with: a missing package is named, with the extra to install ------------------------------------
@pytest.mark.parametrize("sink", ["wandb", "swanlab"])
def test_a_tracker_without_its_package_names_the_extra(sink, monkeypatch):
    original = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == sink else original(name, *a))
    with pytest.raises(ConfigError, match=rf"the {sink} package is not installed; install roll's {sink} extra"):
        tiny(f"track_with={sink}")
    pyproject = (EXAMPLES.parent / "pyproject.toml").read_text()
    assert f'\n{sink} = ["{sink}' in pyproject


@pytest.mark.parametrize("sink", ["wandb", "swanlab"])
def test_wandb_and_swanlab_files_get_their_own_directory(sink):
    assert tiny(f"track_with={sink}").tensorboard_dir == f"./output/tiny_rlvr/{sink}"
    assert tiny().tensorboard_dir == "./output/tiny_rlvr/tensorboard"
    assert tiny(f"track_with={sink}", "logging_dir=/tmp/board").tensorboard_dir == "/tmp/board"


# ---- a config copied out of examples/ the ROLL way --------------------------------------------------------
def test_a_roll_style_block_path_outside_examples_gets_a_hint(tmp_path, capsys):
    text = (TINY / "rlvr_tiny.yaml").read_text().replace("/deepspeed_zero3@_here_", "../config/deepspeed_zero3@_here_")
    (tmp_path / "mine.yaml").write_text(text)
    code, _, err = dry_run(capsys, "--config_path", str(tmp_path), "--config_name", "mine")
    assert code == 2 and "Could not load '../config/deepspeed_zero3'" in err
    assert "loads from any folder as '/deepspeed_zero3@_here_'" in err


def test_the_quickstart_example_composes_from_any_folder(tmp_path):
    quickstart = (EXAMPLES.parent / "docs" / "quickstart.md").read_text()
    section = quickstart[quickstart.index("## 2. Write your own config") :]
    block = section[section.index("```yaml") + 7 : section.index("```", section.index("```yaml") + 7)]
    (tmp_path / "q.yaml").write_text(block)
    composed = compose_config(str(tmp_path), "q")
    assert composed.actor_train.strategy_args.strategy_config.zero_optimization.stage == 2


# ---- dropping an inherited block ---------------------------------------------------------------------------
def test_a_child_config_drops_an_inherited_reward_domain_with_null(tmp_path):
    (tmp_path / "base.yaml").write_text((TINY / "rlvr_tiny.yaml").read_text())
    rewards = {
        "math": None,
        "mine": {"worker_cls": "roll.workers.rewards.math_rule.MathRuleRewardWorker", "tag_included": ["math"]},
    }
    (tmp_path / "child.yaml").write_text(yaml.safe_dump({"defaults": ["base", "_self_"], "rewards": rewards}))
    config = load_rlvr_config(compose_config(str(tmp_path), "child"))
    assert list(config.rewards) == ["mine"]
    assert config.rewards["mine"].name == "rewards.mine"


# ---- what --dry_run prints --------------------------------------------------------------------------------
def test_dry_run_prints_the_loss_pg_variant_selects(capsys):
    code, out, _ = dry_run(capsys, "pg_variant=topr")
    assert code == 0
    assert "policy_loss_mode: topr" in out and "policy_loss_mode: vanilla" not in out
    assert "policy loss: topr (from pg_variant: topr" in out


def test_dry_run_maps_roll_paths_only_where_the_config_gave_one(capsys):
    code, out, _ = dry_run(capsys)  # the demo names roll's own class
    assert code == 0 and "ROLL reward workers" not in out
    roll_path = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"
    code, out, _ = dry_run(capsys, f"rewards.math.worker_cls={roll_path}")
    assert code == 0
    assert f"rewards.math: {roll_path} -> roll.workers.rewards.math_rule.MathRuleRewardWorker" in out
