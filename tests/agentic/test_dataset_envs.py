"""ROLL's roll_math / roll_qa environments: one dataset question per episode, graded as ROLL grades it, the data
read at the first episode only (a config check downloads nothing)."""

import json

import pytest

from roll.agentic.envs import dataset_questions as dq
from roll.agentic.envs import make_env


@pytest.fixture
def math_file(tmp_path):
    path = tmp_path / "dapo.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "solution": str(2 * i)} for i in range(5)]
    rows.append({"prompt": "Simplify 2/4.", "solution": "\\frac{1}{2}"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_math_env_grades_the_last_boxed_answer(math_file):
    env = make_env("roll_math", {"dataset_name": math_file, "question_key": "prompt", "answer_key": "solution"})
    question = env.reset(seed=3)
    assert question == make_env("roll_math", {"dataset_name": math_file, "question_key": "prompt",
                                              "answer_key": "solution"}).reset(seed=3)  # fmt: skip
    right = env.step(f"first \\boxed{{0}}, no: \\boxed{{{env.answer}}}")
    assert right.done and right.reward == 1.0 and right.info == {"action_is_valid": True, "success": True}
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step("\\boxed{1}")
    env.reset(seed=3)
    assert env.step("\\boxed{-1}").reward == 0.0
    env.reset(seed=3)
    unboxed = env.step(f"the answer is {env.answer}")  # ROLL: no \\boxed{} = invalid, reward 0
    assert unboxed.done and unboxed.reward == 0.0 and not unboxed.info["action_is_valid"]
    seeds = [s for s in range(40) if make_env("roll_math", env.config).reset(seed=s) == "Simplify 2/4."]
    env.reset(seed=seeds[0])
    assert env.step("\\boxed{0.5}").reward == 1.0  # math-verify: 0.5 = \\frac{1}{2}


def test_qa_env_exact_match_after_normalising(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"problem": "Capital of France?", "answer": ["Paris", "Paris, France"]}) + "\n")
    env = make_env("roll_qa", {"dataset_name": str(tmp_path), "split": "train", "question_key": "problem"})
    assert env.reset(seed=0) == "Capital of France?"
    assert env.step("<answer>x</answer> then <answer> the PARIS. </answer>").reward == 1.0  # the last tag
    env.reset(seed=1)
    assert env.step("<answer>Lyon</answer>").reward == 0.0
    env.reset(seed=2)
    missing = env.step("Paris")
    assert missing.reward == 0.0 and not missing.info["action_is_valid"]


def test_config_check_reads_no_data_and_reading_errors_name_the_key(math_file, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("the dataset was read while checking the config")

    monkeypatch.setattr("datasets.load_dataset", no_download)
    env = make_env("roll_math", {"dataset_name": "open-r1/DAPO-Math-17k-Processed", "question_key": "prompt"})
    assert env.rows is None  # a Hub id: fetched at the first episode, not now
    with pytest.raises(ValueError, match=r"roll_math env_config.dataset_name = './nope.jsonl': no such file"):
        make_env("roll_math", {"dataset_name": "./nope.jsonl"})
    with pytest.raises(ValueError, match=r"unknown env_config key\(s\) \['prompt_key'\]"):
        make_env("roll_qa", {"dataset_name": math_file, "prompt_key": "x"})
    monkeypatch.undo()
    dq._DATASETS.clear()
    wrong = make_env("roll_math", {"dataset_name": math_file, "question_key": "question"})
    with pytest.raises(ValueError, match=r"question_key = 'question' is not a column of .*\['prompt', 'solution'\]"):
        wrong.reset(seed=0)
    with pytest.raises(ValueError, match=r"split = 'test': .* has the splits \['train'\]"):
        make_env("roll_math", {"dataset_name": math_file, "split": "test", "question_key": "prompt"}).reset(seed=0)


def test_dapo_with_python_code_episode(math_file):
    """ROLL's dapo_17k_with_python_code: roll_math wrapped with the python_code tool, one tool use."""
    from roll.agentic.envs.tools import PythonCodeTool, ToolEnv
    from roll.agentic.envs.tools.wrapper import MAX_USES_NOTE

    math = make_env("roll_math", {"dataset_name": math_file, "question_key": "prompt", "answer_key": "solution"})
    env = ToolEnv(math, [PythonCodeTool("t", timeout=5)], tool_reward=0, tool_success_reward=0, max_tool_uses=1)
    seed = next(s for s in range(40) if make_env("roll_math", math.config).reset(seed=s).startswith("What is"))
    question = env.reset(seed=seed)
    term = question.split()[2]
    tool = env.step(f"Let me compute.\n```python\nprint({term} + {term})\n```")
    assert tool.observation == f"Code execution result: {2 * int(term)}\n\n{MAX_USES_NOTE}" and not tool.done
    final = env.step(f"\\boxed{{{2 * int(term)}}}")
    assert final.done and final.reward == 1.0 and final.info["tool_use_counter"] == 1


def test_the_driver_does_not_reset_envs_that_download_or_ask_a_server(monkeypatch):
    """The first-prompt check (pipeline start, --dry_run with a local tokenizer) resets shipped envs in the driver;
    not roll_math / roll_qa (a dataset download) nor an env with the mcp tool (a server): their env managers
    check at the first reset. Other tags are still checked."""
    from types import SimpleNamespace

    from roll.agentic.env_managers import ChatTokens
    from roll.configs import ConfigError
    from roll.configs.agentic import EnvConfig, EnvManagerConfig, ToolConfig, ToolWrapperConfig
    from roll.demo.tiny_model import build_tokenizer
    from roll.pipeline.agentic.first_prompts import check_first_prompts

    def no_download(*args, **kwargs):
        raise AssertionError("the driver read the dataset")

    monkeypatch.setattr("datasets.load_dataset", no_download)
    mcp = ToolWrapperConfig(tool_configs=[ToolConfig("mcp", {"server_url": "http://127.0.0.1:9/sse"})])
    envs = {
        "Math": EnvConfig(env_type="roll_math", env_config={"dataset_name": "open-r1/DAPO-Math-17k-Processed"}),
        "CalcMcp": EnvConfig(env_type="calculator", tool_wrapper=mcp),  # its reset would list the server's tools
        "Calc": EnvConfig(env_type="calculator"),
    }
    config = SimpleNamespace(
        custom_envs=envs, train_env_manager=EnvManagerConfig(tags=list(envs), num_env_groups=3), val_env_manager=None,
        seed=0, val_seed_offset=0, prompt_length=4, response_length=64,
    )  # fmt: skip
    chat = ChatTokens(build_tokenizer(["What is", "Answer the arithmetic question."]))
    with pytest.raises(ConfigError, match="tag 'Calc' at seed 0"):  # Math and CalcMcp were skipped, Calc checked
        check_first_prompts(config, chat)
