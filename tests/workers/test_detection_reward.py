"""The detection / grounding reward (ROLL's DetectionRewardWorker) on hand-made boxes and replies: IoU, both greedy
matchings, COCO mAP, the parsing of well-formed and malformed replies, the score's arithmetic, the Qwen2.5-VL pixel
rescaling and the worker's settings, each against numbers worked out by hand."""

import json

import numpy as np
import pytest
import torch

from roll.configs import RewardConfig
from roll.configs.worker import ModelArgs
from roll.distributed.data_proto import DataProto
from roll.utils.grading import GRADED, RewardDataError
from roll.workers.rewards import box_match
from roll.workers.rewards.detection import (
    DetectionRewardWorker,
    format_score,
    grade_detection,
    normalize_boxes,
    parse_boxes,
    row_settings,
    select_threshold,
)

EPS = np.spacing(1)  # COCO's precision is tp / (tp + fp + eps)
DEFAULTS = {"format_ratio": 0.1, "accuracy_ratio": 1.0, "det_reward_ratio": {"iou_max_label_first": 1.0}}
DEFAULTS["det_verifier_normalized"] = False


def boxes(*items):
    return [(label, tuple(box)) for label, box in items]


def reply(items, think="I look at the image."):
    listed = json.dumps([{"bbox_2d": list(box), "label": label} for label, box in items])
    return f"<think>{think}</think>\n<answer>\n{listed}\n</answer>"


def truth(items):
    return "<answer>" + str([{"bbox_2d": list(box), "label": label} for label, box in items]) + "</answer>"


def test_iou_matrix_by_hand():
    predicted = boxes(("a", (0, 0, 10, 10)), ("a", (20, 20, 30, 30)))
    true = boxes(("a", (5, 0, 15, 10)), ("a", (10, 0, 20, 10)), ("a", (0, 0, 10, 10)))
    # (0,0,10,10) vs (5,0,15,10): 50 / 150; vs (10,0,20,10): touching edges, 0; vs itself: 1
    expected = [[1 / 3, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert box_match.iou_matrix(predicted, true) == pytest.approx(np.array(expected))


def test_max_iou_first_pairs_the_argmax_not_the_last_boxes():
    """ROLL's loop pairs the last unmatched boxes (here the cat) with the best IoU's value; the intended pairing
    credits the dog that matches (docs/roll_compatibility.md)."""
    predicted = boxes(("dog", (0, 0, 10, 10)), ("cat", (50, 50, 60, 60)))
    true = boxes(("dog", (0, 0, 10, 10)))
    ious, same = box_match.iou_matrix(predicted, true), box_match.same_labels(predicted, true)
    assert box_match.match_max_iou_first(ious, same, 0.5) == [(0, 0, 1.0)]
    # the matched pair's labels differ: matched (consumes both boxes) but credited 0
    wrong = boxes(("cat", (0, 0, 10, 10)))
    assert box_match.match_max_iou_first(box_match.iou_matrix(wrong, true), np.array([[False]]), 0.5) == [(0, 0, 0.0)]
    # below the threshold nothing is matched
    assert box_match.match_max_iou_first(box_match.iou_matrix(predicted, true), same, 1.01) == []


def test_label_first_matches_within_labels():
    predicted = boxes(("cat", (0, 0, 10, 10)), ("dog", (0, 0, 8, 8)), ("dog", (0, 0, 10, 9)))
    true = boxes(("dog", (0, 0, 10, 10)), ("dog", (0, 0, 10, 10)))
    ious, same = box_match.iou_matrix(predicted, true), box_match.same_labels(predicted, true)
    # the first dog truth takes the dog of IoU 0.9 (not the cat of IoU 1), the second the one of IoU 0.64
    assert box_match.match_label_first(ious, same, 0.5) == [(2, 0, pytest.approx(0.9)), (1, 1, pytest.approx(0.64))]
    assert box_match.match_label_first(ious, same, 0.7) == [(2, 0, pytest.approx(0.9))]


def test_iou_score_by_hand():
    predicted = boxes(("dog", (0, 0, 10, 10)), ("cat", (50, 50, 60, 60)), ("cow", (90, 90, 99, 99)))
    true = boxes(("dog", (0, 0, 10, 10)), ("cat", (50, 50, 60, 55)))
    matches = [(0, 0, 1.0), (1, 1, 0.5)]
    score = box_match.iou_score(predicted, true, matches, completeness_weight=0.25)
    # mean IoU (1 + 0.5) / 2; miss 0 / 2; false alarms 1 / 3; completeness 1 − (0 + 1/3) / 2
    assert score["mean_iou"] == 0.75 and score["completeness"] == pytest.approx(5 / 6)
    assert score["precision"] == pytest.approx(2 / 3) and score["recall"] == 1.0
    assert score["weighted"] == pytest.approx(0.75 * 0.75 + 0.25 * 5 / 6)
    # no prediction matched: mean IoU 0, completeness 1 − (1 + 1) / 2
    assert box_match.iou_score(predicted, true, [], 1.0)["weighted"] == 0.0


def test_iou_scores_average_over_the_eleven_thresholds():
    true = boxes(("dog", (0, 0, 10, 10)))
    predicted = boxes(("dog", (0, 0, 8, 8)))  # IoU 0.64: matched at 0.5, 0.55 and 0.6 only
    for matching in ("iou_max_iou_first", "iou_max_label_first"):
        scores = box_match.iou_scores(predicted, true, matching, completeness_weight=0.0)
        assert [scores[t] for t in box_match.IOU_THRESHOLDS] == pytest.approx([0.64] * 3 + [0.0] * 8)
        assert scores["average"] == pytest.approx(3 * 0.64 / 11)


def test_coco_map_by_hand():
    dog = ("dog", (0, 0, 10, 10))
    assert box_match.coco_map(boxes(dog), boxes(dog)) == pytest.approx({"map": 1 / (1 + EPS), "map50": 1, "map75": 1})
    # IoU 0.64: a hit at 0.50, 0.55, 0.60 of the ten COCO thresholds
    assert box_match.coco_map(boxes(("dog", (0, 0, 8, 8))), boxes(dog)) == pytest.approx(
        {"map": 0.3, "map50": 1.0, "map75": 0.0}
    )
    far = ("dog", (50, 50, 60, 60))
    # a miss before the hit: precision 1/2 at recall 1, so AP 0.5 at every threshold; after the hit: AP 1
    assert box_match.coco_map(boxes(far, dog), boxes(dog))["map"] == pytest.approx(0.5)
    assert box_match.coco_map(boxes(dog, far), boxes(dog))["map"] == pytest.approx(1.0)
    # a label the truth lacks is ignored (not a false positive); only such labels: 0
    assert box_match.coco_map(boxes(("cat", (0, 0, 10, 10)), dog), boxes(dog))["map"] == pytest.approx(1.0)
    assert box_match.coco_map(boxes(("cat", (0, 0, 10, 10))), boxes(dog)) == {"map": 0.0, "map50": 0.0, "map75": 0.0}
    # two labels, one found: the mean over labels
    assert box_match.coco_map(boxes(dog), boxes(dog, ("cat", (20, 20, 30, 30))))["map"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[{"bbox_2d": [1, 2, 3, 4], "label": "dog"}]', [("dog", (1, 2, 3, 4))]),
        ("[{'bbox_2d': [1, 2, 3, 4], 'label': 'dog'}]", [("dog", (1, 2, 3, 4))]),  # Python quotes
        ('[[{"bbox_2d": [1, 2, 3, 4], "label": "dog"}]]', [("dog", (1, 2, 3, 4))]),  # doubled brackets
        # cut off inside the second box: the list is closed after the first
        ('[{"bbox_2d": [1, 2, 3, 4], "label": "dog"}, {"bbox_2d": [5, 6', [("dog", (1, 2, 3, 4))]),
        # a repeated position, x1 > x2, 3 numbers, a bool, no label, not a dict: dropped
        (
            '[{"bbox_2d": [1, 2, 3, 4], "label": "a"}, {"bbox_2d": [1, 2, 3, 4], "label": "b"}, '
            '{"bbox_2d": [9, 2, 3, 4], "label": "c"}, {"bbox_2d": [1, 2, 3], "label": "d"}, '
            '{"bbox_2d": [true, 2, 3, 4], "label": "e"}, {"bbox_2d": [0, 0, 1, 1]}, 7, '
            '{"bbox_2d": [0.5, 0, 1.5, 1], "label": "f"}]',
            [("a", (1, 2, 3, 4)), ("f", (0.5, 0, 1.5, 1))],
        ),
        ('{"bbox_2d": [1, 2, 3, 4], "label": "dog"}', None),  # not a list
        ("[]", None),
        ("", None),
        ("there is a dog at the top left", None),
        ('[{"bbox_2d": [1, 2, 3, NaN], "label": "dog"}]', None),
    ],
)
def test_parse_boxes(text, expected):
    assert parse_boxes(text) == expected


def test_format_needs_one_answer_block_on_its_own_lines():
    dog = [("dog", (1, 2, 3, 4))]
    assert format_score(reply(dog)) == 1.0
    assert format_score(reply(dog).replace("\n", "")) == 0.0  # tags not on their own lines
    assert format_score(reply(dog) + "\n<answer>\n[]\n</answer>") == 0.0  # two blocks
    assert format_score("\n<answer>\n" + reply(dog)) == 0.0  # two openings, one closing (ROLL: 1)
    assert format_score("<think>x</think>\n<answer>\nno boxes here\n</answer>") == 0.0


def test_grade_detection_by_hand():
    dog = ("dog", (0, 0, 10, 10))
    exact = grade_detection(reply([dog]), truth([dog]), row_settings(None, DEFAULTS, "t"), "average")
    assert exact["accuracy"] == 1.0 and exact["format"] == 1.0 and exact["score"] == pytest.approx(1.0)
    # IoU 0.64 (accuracy 3·0.64/11 as above), format 1: (1 · accuracy + 0.1 · 1) / 1.1
    near = grade_detection(reply([("Dog", (0, 0, 8, 8))]), truth([dog]), row_settings(None, DEFAULTS, "t"), "average")
    assert near["accuracy"] == pytest.approx(3 * 0.64 / 11)
    assert near["score"] == pytest.approx((3 * 0.64 / 11 + 0.1) / 1.1)
    # an extra box: size penalty 0.6, label-first IoU still 1 at every threshold
    extra = grade_detection(
        reply([dog, ("cat", (50, 50, 60, 60))]), truth([dog]), row_settings(None, DEFAULTS, "t"), 0.5
    )
    assert extra["size_penalty"] == 0.6 and extra["accuracy"] == pytest.approx(0.6)
    # every part weighted: max-IoU-first 1, label-first 1, mAP 0.3 / 1 / 0 at IoU 0.64 (threshold 0.5)
    ratio = {"iou_max_iou_first": 1, "iou_max_label_first": 1, "map": 1, "map50": 1, "map75": 1}
    settings = row_settings({"verifier_parm": {"det_reward_ratio": ratio}, "format_ratio": 0}, DEFAULTS, "t")
    mixed = grade_detection(reply([("dog", (0, 0, 8, 8))]), truth([dog]), settings, 0.5)
    assert mixed["score"] == pytest.approx((0.64 + 0.64 + 0.3 + 1.0 + 0.0) / 5)


@pytest.mark.parametrize(
    "response",
    [
        "a dog at the top left",  # no answer block
        "<answer>\n[]\n</answer>",  # an empty list
        "<answer>\n[{'bbox_2d': [10, 0, 0, 10], 'label': 'dog'}]\n</answer>",  # x1 > x2
        "<answer>\n{'bbox_2d': [0, 0, 10, 10], 'label': 'dog'}\n</answer>",  # not a list
        "<answer>\n[{'bbox_2d': [0, 0, 10, 10], 'label': 'dog'}",  # unclosed answer block
    ],
)
def test_malformed_replies_score_zero(response):
    result = grade_detection(response, truth([("dog", (0, 0, 10, 10))]), row_settings(None, DEFAULTS, "t"), "average")
    assert result["score"] == 0.0 and result["no_boxes"] == 1.0


def test_ground_truth_without_boxes_is_a_data_error():
    settings = row_settings(None, DEFAULTS, "t")
    with pytest.raises(RewardDataError, match="holds no box"):
        grade_detection(reply([("dog", (0, 0, 1, 1))]), "<answer>a dog</answer>", settings, "average")
    bare = '[{"bbox_2d": [0, 0, 1, 1], "label": "dog"}]'  # the bare list is accepted
    assert grade_detection(reply([("dog", (0, 0, 1, 1))]), bare, settings, "average")["accuracy"] == 1.0


def test_row_settings_are_checked():
    assert row_settings(None, DEFAULTS, "t")["det_reward_ratio"]["iou_max_label_first"] == 1.0
    as_json = json.dumps({"ground_truth": "x", "style": "rule", "accuracy_ratio": 2, "verifier_parm": {}})
    assert row_settings(as_json, DEFAULTS, "t")["accuracy_ratio"] == 2.0  # reward_model keys ROLL ignores are fine
    bad = [
        ({"verifier_parm": {"det_reward_ratio": {"map": 1.5}}}, "must be a number in"),
        ({"verifier_parm": {"det_reward_ratio": {"mAP": 1}}}, "unknown keys"),
        ({"verifier_parm": {"det_reward_ratio": {"iou_completeness": 1}}}, "every score weight 0"),
        ({"verifier_parm": {"iou": 0.5}}, "verifier_parm has unknown keys"),
        ({"verifier_parm": {"det_verifier_normalized": "yes"}}, "true or false"),
        ({"format_ratio": 0, "accuracy_ratio": 0}, "divide by 0"),
        ({"format_ratio": -1}, "≥ 0"),
        ("{not json", "not JSON"),
    ]
    for reward_model, message in bad:
        with pytest.raises(RewardDataError, match=message):
            row_settings(reward_model, DEFAULTS, "rewards.det row 3")


def test_dynamic_threshold_follows_progress():
    assert [select_threshold("dynamic", step, 100) for step in (0, 10, 11, 25, 26, 99)] == [0.85] * 2 + [0.95] * 2 + [
        0.99
    ] * 2
    assert select_threshold("average", None, 0) == "average" and select_threshold(0.75, None, 0) == 0.75
    with pytest.raises(RewardDataError, match="global_step"):
        select_threshold("dynamic", None, 100)


def test_normalize_boxes_truncates_like_roll():
    assert normalize_boxes([("dog", (14, 28, 55, 56))], 56, 112) == [("dog", (250, 250, 982, 500))]


# ---- the worker ---------------------------------------------------------------------------------------


def make_worker(monkeypatch, tmp_path=None, model_type=None, **reward_args):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    config = RewardConfig(name="rewards.det", worker_cls="x.Y", reward_args=reward_args)
    if model_type is not None:  # a policy config on disk: only its model type and patch size are read
        from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

        config_class = {"qwen2_5_vl": Qwen2_5_VLConfig, "qwen2_vl": Qwen2VLConfig}[model_type]
        config_class(vision_config={"patch_size": 14}).save_pretrained(tmp_path)
        config.model_args = ModelArgs(model_name_or_path=str(tmp_path))
    worker = DetectionRewardWorker(config, rank=0, world_size=1)
    worker.initialize(total_steps=100)
    return worker


def batch_of(responses, truths, **columns):
    non_tensors = {"prompt_text": ["find the dog"] * len(responses), "response_text": responses}
    non_tensors.update(ground_truth=truths, **columns)
    return DataProto.from_dict(tensors={"responses": torch.zeros(len(responses), 4)}, non_tensors=non_tensors)


def test_worker_scores_rows_with_their_reward_model(monkeypatch):
    worker = make_worker(monkeypatch)
    dog = ("dog", (0, 0, 10, 10))
    rows = [reply([dog]), "no boxes", reply([("dog", (0, 0, 8, 8))])]
    only_map50 = {"verifier_parm": {"det_reward_ratio": {"map50": 1.0}}, "format_ratio": 0.0}
    batch = batch_of(rows, [truth([dog])] * 3, reward_model=[None, None, only_map50])
    out = worker.compute_rewards(batch)
    assert out.batch["scores"].tolist() == pytest.approx([1.0, 0.0, 1.0])  # row 2: mAP@.50 of IoU 0.64 is 1
    assert out.batch["grading_status"].tolist() == [GRADED] * 3
    assert out.batch["metric_mean/format"].tolist() == [1.0, 0.0, 1.0]
    assert out.batch["metric_sum/no_boxes"].tolist() == [0.0, 1.0, 0.0]


def test_worker_settings(monkeypatch):
    with pytest.raises(ValueError, match="unknown keys"):
        make_worker(monkeypatch, iou=0.5)
    with pytest.raises(ValueError, match="iou_threshold"):
        make_worker(monkeypatch, iou_threshold=0.42)
    with pytest.raises(ValueError, match="det_reward_ratio"):
        make_worker(monkeypatch, det_reward_ratio={"map": 2})
    monkeypatch.setenv("DET_IOU_THRESHOLD", "0.95")  # ROLL's way to set it
    assert make_worker(monkeypatch).iou_threshold == 0.95
    assert make_worker(monkeypatch, iou_threshold="dynamic").iou_threshold == "dynamic"  # reward_args wins
    monkeypatch.setenv("DET_IOU_THRESHOLD", "sometimes")
    with pytest.raises(ValueError, match="DET_IOU_THRESHOLD"):
        make_worker(monkeypatch)


def test_worker_dynamic_threshold_reads_the_step(monkeypatch):
    worker = make_worker(monkeypatch, iou_threshold="dynamic")
    batch = batch_of([reply([("dog", (0, 0, 10, 9))])], [truth([("dog", (0, 0, 10, 10))])])  # IoU 0.9
    batch.meta_info["global_step"] = 5  # 5 % of the run: threshold 0.85, the box counts
    assert worker.score(batch) == pytest.approx([(0.9 + 0.1) / 1.1])
    batch.meta_info["global_step"] = 50  # threshold 0.99: it does not
    assert worker.score(batch) == pytest.approx([0.1 / 1.1])


def test_qwen2_5_vl_boxes_are_rescaled_from_pixels(monkeypatch, tmp_path):
    """Qwen2.5-VL answers in pixels of the resized image: a 4×4-patch (56×56 px) image's box (14, 14, 42, 42)
    is (250, 250, 750, 750) in the 0–1000 ground truth."""
    mm = [{"image_grid_thw": torch.tensor([[1, 4, 4]])}]
    row = {"verifier_parm": {"det_verifier_normalized": True}}
    dog = truth([("dog", (250, 250, 750, 750))])
    pixels = reply([("dog", (14, 14, 42, 42))])
    qwen25 = make_worker(monkeypatch, tmp_path / "25", "qwen2_5_vl")
    assert qwen25.score(batch_of([pixels], [dog], reward_model=[row], multi_modal_inputs=mm)) == [1.0]
    with pytest.raises(RewardDataError, match="image_grid_thw"):
        qwen25.score(batch_of([pixels], [dog], reward_model=[row]))
    with pytest.raises(RewardDataError, match="model_name_or_path"):  # which convention is unknown: no guess
        make_worker(monkeypatch).score(batch_of([pixels], [dog], reward_model=[row], multi_modal_inputs=mm))
    # Qwen2-VL already answers in 0–1000: nothing rescaled (ROLL turns det_verifier_normalized off for it)
    qwen2 = make_worker(monkeypatch, tmp_path / "2", "qwen2_vl")
    assert qwen2.score(batch_of([pixels], [dog], reward_model=[row], multi_modal_inputs=mm)) == pytest.approx(
        [0.1 / 1.1]
    )
