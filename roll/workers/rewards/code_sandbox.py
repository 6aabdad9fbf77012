"""Code reward: run the program in the reply against the row's test cases, in the sandbox.

A row's ground truth (or ROLL's `test_cases` / `case_type` columns, read into it by roll.data.prompts) is
JSON: `{"case_type": "input", "test_cases": [{"stdin": "1 2\\n", "expected_stdout": "3\\n"}, …]}` for
stdin/stdout programs, or `{"case_type": "assert", "test_cases": ["assert add(1, 2) == 3", …]}` (or
`{"assert_code": …}` objects) for function-call asserts appended to the program. The program is the last
fenced code block of the reply (```python … ``` or an unlabelled fence); a reply without one scores 0.

Every case runs in its own sandbox run — roll's kernel-isolated sandbox (`use_local: true`), or a
SandboxFusion-compatible `/run_code` endpoint at `code_url` — with `code_case_timeout` seconds and
`code_memory_mb`; up to `code_parallel_cases` cases of a sample at once. The score is 1/0 for all cases
passing (`code_score: all_pass`, ROLL's rule) or the fraction that pass (`pass_rate`).
Step metrics (reward/<domain>/…): pass_rate (mean fraction of cases passed), compile_errors, no_code,
case_timeouts and sandbox_failures (counts).
"""

import json
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.sandbox import require_isolation, run_python
from roll.utils.grading import ERROR, RewardDataError
from roll.workers.rewards.base import RewardWorker

FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
PYTHON_LABELS = {"", "python", "python3", "py"}
CASE_TYPES = ("input", "assert")


@dataclass
class CaseResult:
    passed: bool
    outcome: str  # passed | wrong | error | compile_error | timeout | sandbox_failure


def extract_program(reply: str) -> str | None:
    """The last fenced Python (or unlabelled) block of the reply, or None."""
    blocks = [code for label, code in FENCE.findall(reply) if label.lower() in PYTHON_LABELS]
    return blocks[-1] if blocks else None


def parse_cases(truth, where: str) -> tuple[str, list]:
    """(case_type, cases) from a row's ground truth; a malformed one is a RewardDataError naming the row."""
    example = '{"case_type": "input", "test_cases": [{"stdin": "1 2\\n", "expected_stdout": "3\\n"}]}'
    try:
        spec = json.loads(truth) if isinstance(truth, str) else truth
    except ValueError as error:
        raise RewardDataError(f"{where}: ground truth is not JSON ({error}); code rows look like {example}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("test_cases"), list) or not spec["test_cases"]:
        raise RewardDataError(f"{where}: ground truth needs a non-empty 'test_cases' list, e.g. {example}")
    case_type = spec.get("case_type") or "input"
    if case_type not in CASE_TYPES:
        raise RewardDataError(
            f"{where}: case_type {case_type!r} is not supported (supported: {CASE_TYPES}; 'pytest' and 'text' "
            "need packages or templates the standard-library-only sandbox does not have)"
        )
    for index, case in enumerate(spec["test_cases"]):
        ok = (
            isinstance(case, dict) and isinstance(case.get("stdin", ""), str) and "expected_stdout" in case
            if case_type == "input"
            else isinstance(case, str) or (isinstance(case, dict) and isinstance(case.get("assert_code"), str))
        )
        if not ok:
            raise RewardDataError(f"{where}: test case {index} {case!r} does not fit case_type {case_type!r}")
    return case_type, spec["test_cases"]


def same_output(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines."""

    def lines(text):
        return [line.rstrip() for line in text.rstrip().splitlines()]

    return lines(actual) == lines(str(expected))


def case_program(program: str, case_type: str, case) -> tuple[str, str, str | None]:
    """(code, stdin, expected stdout or None for asserts) of one test case."""
    if case_type == "input":
        return program, case.get("stdin", ""), str(case["expected_stdout"])
    assert_code = case if isinstance(case, str) else case["assert_code"]
    return f"{program}\n\n{assert_code}\n", "", None


def judge(returncode, timed_out: bool, stdout: str, stderr: str, expected: str | None) -> CaseResult:
    if timed_out:
        return CaseResult(False, "timeout")
    if returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        compile_error = last.startswith(("SyntaxError", "IndentationError", "TabError"))
        return CaseResult(False, "compile_error" if compile_error else "error")
    if expected is not None and not same_output(stdout, expected):
        return CaseResult(False, "wrong")
    return CaseResult(True, "passed")


class CodeSandboxRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        config = self.worker_config
        if config.use_local:
            require_isolation(config.allow_unsafe_local_sandbox)  # refuse at start-up, naming what is missing
        elif not config.code_url:
            raise ValueError(f"{self.worker_name}: use_local is false, so code_url must name a /run_code endpoint")

    def score(self, batch: DataProto) -> list[float]:
        config = self.worker_config
        columns = batch.non_tensor_batch
        scores, pass_rates, compile_errors, no_code, timeouts, failures = [], [], [], [], [], []
        with ThreadPoolExecutor(max_workers=config.code_parallel_cases) as pool:
            for row, (reply, truth) in enumerate(zip(columns["response_text"], columns["ground_truth"])):
                case_type, cases = parse_cases(truth, f"{self.worker_name} row {row}")
                program = extract_program(reply)
                if program is None:
                    results = [CaseResult(False, "no_code")] * len(cases)
                else:
                    results = list(pool.map(self.run_case, [program] * len(cases), [case_type] * len(cases), cases))
                passed = sum(r.passed for r in results) / len(results)
                scores.append(passed if config.code_score == "pass_rate" else float(passed == 1.0))
                pass_rates.append(passed)
                outcomes = [r.outcome for r in results]
                compile_errors.append("compile_error" in outcomes)
                no_code.append(program is None)
                timeouts.append(outcomes.count("timeout"))
                failures.append(outcomes.count("sandbox_failure"))
                if failures[-1] and self._grading_status is not None:
                    self._grading_status[row] = ERROR  # counted in reward/<domain>/errors too
        self.record_metric("pass_rate", pass_rates)
        self.record_metric("compile_errors", compile_errors, reduce="sum")
        self.record_metric("no_code", no_code, reduce="sum")
        self.record_metric("case_timeouts", timeouts, reduce="sum")
        self.record_metric("sandbox_failures", failures, reduce="sum")
        return scores

    def run_case(self, program: str, case_type: str, case) -> CaseResult:
        code, stdin, expected = case_program(program, case_type, case)
        config = self.worker_config
        if config.use_local:
            result = run_python(
                code,
                timeout=config.code_case_timeout,
                memory_mb=config.code_memory_mb,
                stdin=stdin,
                allow_unsafe=config.allow_unsafe_local_sandbox,
            )
            return judge(result.returncode, result.timed_out, result.stdout, result.stderr, expected)
        return self.run_remote(code, stdin, expected)

    def run_remote(self, code: str, stdin: str, expected: str | None) -> CaseResult:
        """One case at code_url (SandboxFusion's /run_code request and response), retried on HTTP errors,
        time-outs and status SandboxError; a case that never gets an answer is a sandbox failure."""
        config = self.worker_config
        request = {
            "code": code,
            "language": "python",
            "stdin": stdin,
            "compile_timeout": config.code_case_timeout,
            "run_timeout": config.code_case_timeout,
        }
        last_error = None
        for attempt in range(config.code_http_retries):
            try:
                reply = post_json(config.code_url, request, timeout=config.code_case_timeout + 10)
            except (OSError, ValueError) as error:  # URLError, HTTPError, time-outs, bad JSON
                last_error = error
            else:
                if reply.get("status") != "SandboxError":
                    run = reply.get("run_result") or {}
                    return judge(
                        run.get("return_code"),
                        run.get("status") == "TimeLimitExceeded",
                        run.get("stdout") or "",
                        run.get("stderr") or "",
                        expected,
                    )
                last_error = RuntimeError(reply.get("message", "SandboxError"))
            time.sleep(min(2**attempt * 0.2, 2.0))
        self.logger.warning(
            "%s: code_url %s failed %d times for a test case, last: %r (counted in sandbox_failures)",
            self.worker_name,
            config.code_url,
            config.code_http_retries,
            last_error,
        )
        return CaseResult(False, "sandbox_failure")


def post_json(url: str, payload: dict, timeout: float) -> dict:
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())
