"""The code reward on hand-made replies, through the local sandbox and through a real local HTTP server
(roll.sandbox.server) speaking SandboxFusion's /run_code; its metrics; and ROLL's dotted path."""

import json
import threading

import pytest
import torch

from roll.configs import RewardConfig
from roll.distributed.data_proto import DataProto
from roll.sandbox.server import make_server
from roll.utils.grading import ERROR, GRADED, RewardDataError
from roll.workers.rewards.code_sandbox import CodeSandboxRewardWorker, extract_program, parse_cases

ADD = json.dumps(
    {
        "case_type": "input",
        "test_cases": [
            {"stdin": "1 2\n", "expected_stdout": "3\n"},
            {"stdin": "10 -4\n", "expected_stdout": "6"},
            {"stdin": "0 0\n", "expected_stdout": "0\n"},
        ],
    }
)
ASSERTS = json.dumps(
    {"case_type": "assert", "test_cases": ["assert add(1, 2) == 3", {"assert_code": "assert add(2, 2) == 4"}]}
)
FENCED = "Here you go:\n```python\n{}\n```\nDone."
REPLIES = {
    "correct": FENCED.format("a, b = map(int, input().split())\nprint(a + b)"),
    "wrong": FENCED.format("a, b = map(int, input().split())\nprint(a - b)"),  # passes 1 of 3 (0 0)
    "no_code": "The answer is a + b.",
    "syntax": FENCED.format("a, b = map(int, input().split()\nprint(a + b)"),
    "hang": FENCED.format("print(3)\nimport time\ntime.sleep(60)"),
}


def make_worker(monkeypatch, **settings):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    # 3 s per case: a correct program must not time out on a loaded machine; the hanging one costs 3 s
    config = RewardConfig(name="rewards.code", worker_cls="x.Y", code_case_timeout=3.0, **settings)
    worker = CodeSandboxRewardWorker(config, rank=0, world_size=1)
    worker.initialize()
    return worker


def grade(worker, replies, truths):
    batch = DataProto.from_dict(non_tensors={"response_text": replies, "ground_truth": truths})
    out = worker.compute_rewards(batch)
    return out.batch["scores"].tolist(), out


@pytest.fixture(scope="module")
def server():
    httpd = make_server("127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/run_code"
    httpd.shutdown()


@pytest.mark.parametrize("remote", [False, True], ids=["local", "http"])
def test_verdicts_and_metrics(monkeypatch, server, remote):
    settings = {"use_local": False, "code_url": server} if remote else {}
    worker = make_worker(monkeypatch, code_score="pass_rate", code_parallel_cases=3, **settings)
    names = list(REPLIES)
    scores, out = grade(worker, [REPLIES[n] for n in names], [ADD] * len(names))
    assert dict(zip(names, scores)) == pytest.approx(
        {"correct": 1.0, "wrong": 1 / 3, "no_code": 0.0, "syntax": 0.0, "hang": 0.0}
    )
    assert out.batch["metric_mean/pass_rate"].tolist() == pytest.approx([1.0, 1 / 3, 0.0, 0.0, 0.0])
    assert out.batch["metric_sum/compile_errors"].tolist() == [0, 0, 0, 1, 0]
    assert out.batch["metric_sum/no_code"].tolist() == [0, 0, 1, 0, 0]
    assert out.batch["metric_sum/case_timeouts"].tolist() == [0, 0, 0, 0, 3]
    assert out.batch["metric_sum/sandbox_failures"].tolist() == [0] * 5
    assert out.batch["grading_status"].tolist() == [GRADED] * 5


def test_all_pass_and_asserts(monkeypatch):
    worker = make_worker(monkeypatch)  # code_score: all_pass, ROLL's rule
    add = FENCED.format("def add(a, b):\n    return a + b")
    off = FENCED.format("def add(a, b):\n    return a + b if a != 2 else 0")
    scores, _ = grade(worker, [REPLIES["correct"], REPLIES["wrong"], add, off], [ADD, ADD, ASSERTS, ASSERTS])
    assert scores == [1.0, 0.0, 1.0, 0.0]


def test_unreachable_endpoint_is_a_counted_sandbox_failure(monkeypatch):
    worker = make_worker(monkeypatch, use_local=False, code_url="http://127.0.0.1:9/run_code", code_http_retries=2)
    scores, out = grade(worker, [REPLIES["correct"]], [ADD])
    assert scores == [0.0] and out.batch["metric_sum/sandbox_failures"].tolist() == [3]
    assert out.batch["grading_status"].tolist() == [ERROR]


def test_malformed_rows_name_the_row():
    with pytest.raises(RewardDataError, match="row 7: ground truth is not JSON"):
        parse_cases("not json", "row 7")
    with pytest.raises(RewardDataError, match="case_type 'pytest' is not supported"):
        parse_cases(json.dumps({"case_type": "pytest", "test_cases": ["x"]}), "row 1")
    with pytest.raises(RewardDataError, match="test case 0"):
        parse_cases(json.dumps({"test_cases": [{"stdin": "1"}]}), "row 2")


def test_program_extraction():
    assert extract_program("```python\nprint(1)\n```\n```\nprint(2)\n```") == "print(2)\n"
    assert extract_program("```cpp\nint main(){}\n```") is None
    assert extract_program("print(1)") is None


def test_roll_path_and_refusal_without_isolation(monkeypatch):
    from roll.configs.roll_compat.keys import ROLL_REWARD_WORKERS
    from roll.sandbox import SandboxUnavailable, runner

    # ROLL's dotted path is rewritten to ours at load time (no shim module under roll.pipeline.rlvr.rewards)
    roll_path = "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker"
    ours = ROLL_REWARD_WORKERS[roll_path]
    assert ours == f"{CodeSandboxRewardWorker.__module__}.{CodeSandboxRewardWorker.__name__}"
    monkeypatch.setattr(runner, "layers", lambda: {"cgroup": (False, "no cgroup v1 or v2")})
    with pytest.raises(SandboxUnavailable, match="cgroup: no cgroup v1 or v2"):
        make_worker(monkeypatch)
    worker = make_worker(monkeypatch, allow_unsafe_local_sandbox=True)  # explicit opt-out still grades
    assert grade(worker, [REPLIES["correct"]], [ADD])[0] == [1.0]
    assert torch.is_tensor(grade(worker, [REPLIES["correct"]], [ADD])[1].batch["scores"])
