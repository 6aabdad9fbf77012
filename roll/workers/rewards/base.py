"""Reward workers: subclass `RewardWorker` and implement `score(batch) -> list[float]`.

The pipeline hands each domain the rows whose `tag` it includes, with `prompt_text`,
`response_text` and `ground_truth` as non-tensor columns (decoded once on the driver), and puts the
returned score on each response's last token. A user's class lives in their own module and is named
by dotted path in `rewards.<domain>.worker_cls`.

`score` may grade row by row through `grade_rows(batch, grade)` (the built-in workers do): each row then
gets `rewards.<domain>.timeout` seconds, and a grader that raises or times out scores 0, is counted in
the step metrics (`reward/<domain>/errors`, `reward/<domain>/timeouts`) and the first few are logged with
their row.
"""

import math
from numbers import Real

import torch

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.utils.errors import PluginError
from roll.utils.grading import GRADED, TIMEOUT, grade_each_with_time_limit

LOGGED_FAILURES = 5  # per worker: the first failures are logged with their row, all are counted
EXCERPT_CHARS = 200


class RewardWorker(Worker):
    # True: every row this worker scores must carry a ground truth; the pipeline checks the data at start-up
    # (a row without one fails there, naming its file and row, instead of in step 1)
    needs_ground_truth = False
    _grading_status: torch.Tensor | None = None
    _row_metrics: dict | None = None
    _failures_logged = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        """Override to load resources (a reward model, a test-case store); called once."""

    def score(self, batch: DataProto) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement score(batch) -> list[float]")

    def grade_rows(self, batch: DataProto, grade, fast=None, truths=None) -> list[float]:
        """`grade(response_text, ground_truth) -> float` for every row, each within worker_config.timeout
        seconds. A grader that raises or times out gives 0.0 for that row, counted (the row's
        `grading_status`) and logged for the first few; a RewardDataError stops the step. Pass the batch
        `score` received (statuses are recorded by row position).

        fast: an optional `fast(response_text, ground_truth) -> float | None` tried first, in this thread
        and without a time limit (it must be cheap and bounded, e.g. one regular expression): a number is
        the row's score, None hands the row to `grade`. The other rows are graded one after another in one
        background thread (roll.utils.grading.grade_each_with_time_limit).

        truths: what `grade` gets as each row's second argument instead of its ground truth (e.g. the ground
        truth with row settings the worker read from other columns); one per row."""
        columns = batch.non_tensor_batch
        truths = columns["ground_truth"] if truths is None else truths
        if len(truths) != len(batch):
            raise ValueError(f"grade_rows: {len(truths)} truths for {len(batch)} rows")
        rows = list(zip(columns["response_text"], truths))
        scores = [fast(*row) if fast is not None else None for row in rows]
        slow = [index for index, value in enumerate(scores) if value is None]
        outcomes = grade_each_with_time_limit(grade, [rows[index] for index in slow], self.worker_config.timeout)
        for row, (value, status, error) in zip(slow, outcomes):
            if status != GRADED:
                if self._grading_status is not None:
                    self._grading_status[row] = status
                self._log_failure(batch, row, status, error)
            scores[row] = value
        return scores

    def record_metric(self, name: str, values, reduce: str = "mean") -> None:
        """A per-row number for the step metrics: the pipeline logs reward/<domain>/<name> as the mean (or the
        sum, with reduce="sum") over the step's rows of this domain. Call from `score`, one value per row."""
        if reduce not in ("mean", "sum"):
            raise ValueError(f"record_metric({name!r}): reduce must be 'mean' or 'sum', got {reduce!r}")
        if self._row_metrics is not None:
            self._row_metrics[f"metric_{reduce}/{name}"] = torch.tensor([float(v) for v in values])

    def _log_failure(self, batch: DataProto, row: int, status: int, error: BaseException | None) -> None:
        if self._failures_logged >= LOGGED_FAILURES:
            return
        self._failures_logged += 1
        columns = batch.non_tensor_batch
        what = f"timed out after {self.worker_config.timeout} s" if status == TIMEOUT else f"raised {error!r}"
        domain = self.worker_name.removeprefix("rewards.")
        self.logger.warning(
            "grading %s, the sample scores 0 (logged failure %d of at most %d; all are counted in "
            "reward/%s/errors and reward/%s/timeouts)\n  prompt:       %s\n  response:     %s\n  ground truth: %s",
            what,
            self._failures_logged,
            LOGGED_FAILURES,
            domain,
            domain,
            _excerpt(columns.get("prompt_text", [None] * len(batch))[row]),
            _excerpt(columns["response_text"][row]),
            _excerpt(columns["ground_truth"][row]),
            exc_info=error,  # the grader's traceback (None for a time-out)
        )

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_rewards(self, batch: DataProto) -> DataProto:
        """`scores` and each row's `grading_status` (grading.GRADED, ERROR or TIMEOUT)."""
        self._grading_status = torch.full((len(batch),), GRADED, dtype=torch.int8)
        self._row_metrics = {}
        try:
            scores = list(self.score(batch))
            status, row_metrics = self._grading_status, self._row_metrics
        finally:
            self._grading_status = self._row_metrics = None
        if len(scores) != len(batch):
            raise PluginError(f"{type(self).__name__}.score returned {len(scores)} scores for {len(batch)} rows")
        for row, value in enumerate(scores):  # Python or numpy numbers; not tensors, strings or None
            if not isinstance(value, Real) or not math.isfinite(value):
                raise PluginError(
                    f"{type(self).__name__}.score: row {row} has score {value!r}; scores must be finite numbers"
                )
        for name, values in row_metrics.items():
            if len(values) != len(batch):
                raise PluginError(
                    f"{type(self).__name__}.record_metric: {name} has {len(values)} values for {len(batch)} rows"
                )
        scores = torch.tensor([float(v) for v in scores], dtype=torch.float32)
        return DataProto.from_dict(tensors={"scores": scores, "grading_status": status, **row_metrics})


def _excerpt(text) -> str:
    text = repr(text) if not isinstance(text, str) else text
    return text if len(text) <= EXCERPT_CHARS else f"{text[:EXCERPT_CHARS]}… ({len(text)} chars)"
