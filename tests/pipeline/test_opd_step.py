"""On-policy distillation in the PPO update (roll.pipeline.core.opd): each teacher scores only the rows routed
to it (ROLL's domain routing), the scores are scattered back with 0 elsewhere, and the advantage step subtracts
Σ c·KL from the RL estimator's advantages (use_opd) or uses −Σ c·KL alone (pure); hand-computed numbers."""

import dataclasses

import numpy as np
import pytest
import torch

from roll.configs.algorithm import RLAlgorithmConfig
from roll.configs.opd import TeacherConfig, routes
from roll.distributed.data_proto import DataProto
from roll.pipeline.core import step_maths
from roll.pipeline.core.opd import LOG_PROBS, ROWS, _score, teacher_rows
from roll.utils.functional import scores_on_last_token

OLD = torch.tensor([[-1.0, -2.0], [-1.0, -1.0], [-3.0, 0.0]])
TEACHER = {  # each teacher's log-probs of the student's tokens on every row (a routed teacher sees its rows only)
    "teacher.a": torch.tensor([[-1.5, -1.0], [-9.0, -9.0], [-2.0, -7.0]]),
    "teacher.b": torch.tensor([[-1.0, -3.0], [-2.0, -1.0], [-3.0, -5.0]]),
}


@dataclasses.dataclass
class _Config(RLAlgorithmConfig):
    def opd_routing(self):  # RLVR's: rows by reward domain, a domain's tags are its tag_included
        return "domain", {"math": {"math"}, "code": {"code"}}


def _config(**keys):
    teachers = {"a": TeacherConfig(opd_kl_coef=0.5, tag_included=["math"]), "b": TeacherConfig()}
    return _Config(adv_estimator="reinforce", use_opd=True, teacher=teachers, **keys)


def _batch():
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    scores = torch.tensor([1.0, 0.0, 1.0])
    tensors = {
        "responses": torch.zeros(3, 2, dtype=torch.long),
        "row": torch.arange(3),
        "response_mask": mask,
        "old_log_probs": OLD,
        "scores": scores,
        "token_level_scores": scores_on_last_token(scores, mask),
        "token_level_rewards": scores_on_last_token(scores, mask),
    }
    rows = {"domain": np.array(["math", "code", "math"], dtype=object), "uid": np.array(["p", "q", "s"], dtype=object)}
    return DataProto.from_dict(tensors, rows)


class _Update:
    """Test double of PPOUpdate.forward_log_probs: the teacher's log-probs of exactly the rows it is handed."""

    def __init__(self):
        self.seen = {}

    def forward_log_probs(self, role, part, key):
        self.seen[role] = part.batch["row"].tolist()
        part.batch[key] = TEACHER[role][part.batch["row"]] * part.batch["response_mask"]


def _scored(config):
    batch, update = _batch(), _Update()
    for role, rows in teacher_rows(config, batch).items():
        _score(update, role, batch, ["responses", "row", "response_mask"], role, rows)
    return batch, update


def test_teachers_score_only_their_rows_and_the_rest_is_zero():
    config = _config()
    assert routes(config) == {"math": ["teacher.a", "teacher.b"], "code": ["teacher.b"]}
    batch, update = _scored(config)
    assert update.seen == {"teacher.a": [0, 2], "teacher.b": [0, 1, 2]}
    assert batch.batch[ROWS + "teacher.a"].tolist() == [True, False, True]
    torch.testing.assert_close(batch.batch[LOG_PROBS + "teacher.a"], torch.tensor([[-1.5, -1.0], [0, 0], [-2.0, 0]]))


def test_mixed_advantages_subtract_the_weighted_kl_after_the_estimator():
    batch, _ = _scored(_config())
    metrics = step_maths.compute_advantages(batch, _config())
    # KL = old − teacher; a (c = 0.5, rows 0 and 2): [.25, −.5], 0, [−.5, 0]; b (c = 1): [0, 1], [1, 0], [0, 0]
    # reinforce with γ = 1: A_RL = the row's score on every response token; A = A_RL − Σ c·KL, returns = A_RL
    torch.testing.assert_close(batch.batch["advantages"], torch.tensor([[0.75, 0.5], [-1.0, 0.0], [1.5, 0.0]]))
    torch.testing.assert_close(batch.batch["returns"], torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]))
    assert not [key for key in batch.batch.keys() if key.startswith(("opd_log_probs/", "opd_rows/"))]
    assert metrics["opd/teacher.a/tokens"] == 3 and metrics["opd/teacher.b/tokens"] == 5
    assert metrics["opd/kl"] == pytest.approx((0.25 + 0.5 + 1 - 0.5) / 5)


def test_pure_mode_ignores_the_estimator():
    @dataclasses.dataclass
    class _Pure(_Config):
        @property
        def opd_mode(self):
            return "pure"

    config = _Pure(adv_estimator="gae", teacher={"a": TeacherConfig(opd_kl_coef=0.5, tag_included=["math"])})
    batch, _ = _scored(config)
    step_maths.compute_advantages(batch, config)
    # rows of no teacher (row 1, code) get advantage 0 (ROLL)
    expected = -0.5 * torch.tensor([[0.5, -1.0], [0.0, 0.0], [-1.0, 0.0]])
    torch.testing.assert_close(batch.batch["advantages"], expected)
    torch.testing.assert_close(batch.batch["returns"], expected)
