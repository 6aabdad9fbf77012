"""Detection / grounding reward (ROLL's DetectionRewardWorker): boxes in `<answer>` tags graded by IoU and mAP.

A reply lists boxes as JSON inside `<answer>` tags, as the Qwen-VL models write them:

    <think>…</think>
    <answer>
    [{"bbox_2d": [10, 20, 110, 140], "label": "dog"}, {"bbox_2d": [5, 5, 40, 60], "label": "cat"}]
    </answer>

The ground truth is the same list, with or without the tags. Per row:

    format    1 when the reply has exactly one "\\n<answer>\\n" … "\\n</answer>" block holding at least one box
    accuracy  Σ_k r_k · s_k / Σ_k r_k over k in {iou_max_iou_first, iou_max_label_first, map, map50, map75},
              r = det_reward_ratio, each s_k times the size penalty 0.6^|#predicted − #true|; the IoU scores are
              those of roll.workers.rewards.box_match at `iou_threshold` ("average" over the 11 thresholds,
              "dynamic": 0.85 / 0.95 / 0.99 after 10 % / 25 % of the run, or one threshold)
    score     (accuracy_ratio · accuracy + format_ratio · format) / (accuracy_ratio + format_ratio)

Settings come per row from ROLL's `reward_model` column when the batch carries it ({"format_ratio",
"accuracy_ratio", "verifier_parm": {"det_reward_ratio", "det_verifier_normalized", …}}), else from
`rewards.<domain>.reward_args` (same names). With det_verifier_normalized on a Qwen2.5-VL policy (absolute pixel
coordinates) the predicted boxes are first rescaled to 0–1000 by the row's first image size (its
`multi_modal_inputs` image_grid_thw × the patch size); Qwen2-VL and Qwen3-VL already answer in 0–1000.
"""

import json
import math
import os
import re

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.utils.grading import RewardDataError
from roll.workers.rewards.base import RewardWorker
from roll.workers.rewards.box_match import IOU_THRESHOLDS, coco_map, iou_scores

RATIO_KEYS = ("iou_max_iou_first", "iou_max_label_first", "map", "map50", "map75")  # weighted in the score
DET_RATIO_KEYS = (*RATIO_KEYS, "iou_completeness")  # iou_completeness: the blend inside the IoU scores
DEFAULT_DET_RATIO = {"iou_max_label_first": 1.0}  # where neither the row nor reward_args names one
VERIFIER_KEYS = ("det_reward_ratio", "det_verifier_normalized", "verifier_style", "image_path")
# keys ROLL's worker itself fills into verifier_parm before grading; a row may carry them, they are ignored
RUNTIME_VERIFIER_KEYS = ("is_training", "step", "total_steps", "image_grid_thw")
REWARD_ARGS = ("iou_threshold", "det_reward_ratio", "det_verifier_normalized", "format_ratio", "accuracy_ratio")
THRESHOLDS = (*IOU_THRESHOLDS, "average", "dynamic")
SIZE_PENALTY_BASE = 0.6
NORMALIZED_RANGE = 1000.0
# model types whose boxes are absolute pixels of the resized image (ROLL: processor class names Qwen2_5*)
ABSOLUTE_COORDINATE_MODELS = ("qwen2_5_vl", "qwen2_5_omni")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def answer_content(text: str) -> str:
    """The stripped text of the first `<answer>…</answer>` block, "" without one."""
    found = _ANSWER.search(text)
    return found.group(1).strip() if found else ""


def parse_boxes(text: str) -> list[tuple[str, tuple]] | None:
    """The boxes of a JSON list `[{"bbox_2d": [x1, y1, x2, y2], "label": …}, …]`, read as ROLL reads them:
    single quotes and backslashes tolerated, a list cut off after its last complete box repaired, items that
    are not a box (4 numbers with x1 ≤ x2, y1 ≤ y2, a string label) and repeated positions dropped.
    None when nothing usable is left."""
    text = text.strip()
    if not text:
        return None
    text = text.replace("[[", "[").replace("]]", "]")
    if not text.endswith("]"):
        text = text.rsplit("},", 1)[0] + "}]"
    try:
        items = json.loads(text.replace("'", '"').replace("\\", ""))
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    boxes, seen = [], set()
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("label"), str):
            continue
        box = item.get("bbox_2d")
        if not isinstance(box, list) or len(box) != 4:
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in box):
            continue
        if box[0] > box[2] or box[1] > box[3] or tuple(box) in seen:
            continue
        seen.add(tuple(box))
        boxes.append((item["label"], tuple(box)))
    return boxes or None


def format_score(response: str) -> float:
    """1 when the reply has exactly one "\\n<answer>\\n" opening and one "\\n</answer>" closing and its first
    answer block holds at least one box."""
    if response.count("\n<answer>\n") != 1 or response.count("\n</answer>") != 1:
        return 0.0
    return 1.0 if parse_boxes(answer_content(response.strip())) else 0.0


def truth_boxes(ground_truth) -> list:
    """The true boxes of a row (inside `<answer>` tags or bare), lower-cased as ROLL compares them."""
    text = str(ground_truth or "").strip()
    boxes = parse_boxes((answer_content(text) if "<answer>" in text else text).lower())
    if boxes is None:
        raise RewardDataError(
            f"detection reward: ground_truth {str(ground_truth)[:200]!r} holds no box; expected "
            "<answer>[{'bbox_2d': [x1, y1, x2, y2], 'label': 'name'}, …]</answer> (or the bare list)"
        )
    return boxes


def normalize_boxes(boxes: list, width: float, height: float) -> list:
    """Absolute pixel boxes of a width × height image → 0–1000 (truncated to integers, as ROLL)."""
    scale = NORMALIZED_RANGE
    return [
        (label, (int(x1 / width * scale), int(y1 / height * scale), int(x2 / width * scale), int(y2 / height * scale)))
        for label, (x1, y1, x2, y2) in boxes
    ]


def select_threshold(iou_threshold, step: int | None, total_steps: int) -> float | str:
    """The IoU scores' threshold: a number or "average" as set; "dynamic" by the run's progress."""
    if iou_threshold != "dynamic":
        return iou_threshold
    if step is None or total_steps <= 0:
        raise RewardDataError(
            "detection reward: iou_threshold 'dynamic' needs the step and the run's length; this batch has no "
            "meta_info['global_step'] (or the worker no total_steps)"
        )
    progress = step / total_steps
    return 0.85 if progress <= 0.1 else 0.95 if progress <= 0.25 else 0.99


def accuracy_score(predicted: list | None, truth: list, ratio: dict, threshold) -> dict:
    """ROLL's detection accuracy (module docstring) and its parts; `predicted` None (no boxes) scores 0."""
    if not predicted:
        return {"accuracy": 0.0, "size_penalty": 0.0}
    penalty = SIZE_PENALTY_BASE ** abs(len(predicted) - len(truth))
    parts = {
        matching: iou_scores(predicted, truth, matching, ratio["iou_completeness"])[threshold]
        for matching in ("iou_max_iou_first", "iou_max_label_first")
    }
    parts.update(coco_map(predicted, truth))
    total = sum(ratio[key] for key in RATIO_KEYS)
    accuracy = sum(ratio[key] * parts[key] * penalty for key in RATIO_KEYS) / total
    return {"accuracy": accuracy, "size_penalty": penalty, **parts}


def det_ratio(value, where: str) -> dict:
    """A det_reward_ratio with every key (missing ones 0, as ROLL); each weight in [0, 1], some score weight > 0."""
    if not isinstance(value, dict):
        raise RewardDataError(f"{where}: det_reward_ratio must be a mapping of {list(DET_RATIO_KEYS)}, got {value!r}")
    unknown = sorted(set(value) - set(DET_RATIO_KEYS))
    if unknown:
        raise RewardDataError(f"{where}: det_reward_ratio has unknown keys {unknown}; valid: {list(DET_RATIO_KEYS)}")
    ratio = {key: value.get(key, 0.0) for key in DET_RATIO_KEYS}
    for key, weight in ratio.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
            raise RewardDataError(f"{where}: det_reward_ratio.{key} = {weight!r}; must be a number in [0, 1]")
    if not sum(ratio[key] for key in RATIO_KEYS) > 0:
        raise RewardDataError(f"{where}: det_reward_ratio gives every score weight 0 ({list(RATIO_KEYS)})")
    return ratio


def _non_negative(value, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RewardDataError(f"{where}: {name} = {value!r}; must be a number ≥ 0")
    return float(value)


def row_settings(reward_model, defaults: dict, where: str) -> dict:
    """A row's ratios and verifier settings: its ROLL `reward_model` (a dict or its JSON text; None = none)
    over the worker's defaults."""
    if isinstance(reward_model, str):
        try:
            reward_model = json.loads(reward_model)
        except ValueError:
            raise RewardDataError(f"{where}: reward_model is not JSON: {reward_model[:200]!r}") from None
    reward_model = reward_model or {}
    if not isinstance(reward_model, dict):
        raise RewardDataError(f"{where}: reward_model must be a mapping, got {type(reward_model).__name__}")
    verifier = reward_model.get("verifier_parm") or {}
    if not isinstance(verifier, dict):
        raise RewardDataError(f"{where}: reward_model.verifier_parm must be a mapping, got {verifier!r}")
    unknown = sorted(set(verifier) - set(VERIFIER_KEYS) - set(RUNTIME_VERIFIER_KEYS))
    if unknown:
        raise RewardDataError(f"{where}: verifier_parm has unknown keys {unknown}; valid: {list(VERIFIER_KEYS)}")
    settings = {
        "format_ratio": _non_negative(
            reward_model.get("format_ratio", defaults["format_ratio"]), "format_ratio", where
        ),
        "accuracy_ratio": _non_negative(
            reward_model.get("accuracy_ratio", defaults["accuracy_ratio"]), "accuracy_ratio", where
        ),
        "det_reward_ratio": det_ratio(verifier.get("det_reward_ratio", defaults["det_reward_ratio"]), where),
        "normalized": verifier.get("det_verifier_normalized", defaults["det_verifier_normalized"]),
    }
    if not isinstance(settings["normalized"], bool):
        raise RewardDataError(f"{where}: det_verifier_normalized = {settings['normalized']!r}; must be true or false")
    if not settings["format_ratio"] + settings["accuracy_ratio"] > 0:
        raise RewardDataError(f"{where}: format_ratio + accuracy_ratio is 0; the score would divide by 0")
    return settings


def grade_detection(response: str, ground_truth, settings: dict, threshold, image_size=None) -> dict:
    """One row's {"score", "format", "accuracy", …}; image_size (width, height): rescale the predicted boxes
    from pixels to 0–1000 first (a Qwen2.5-VL policy with det_verifier_normalized)."""
    truth = truth_boxes(ground_truth)
    predicted = parse_boxes(answer_content(response.strip()).lower())
    if predicted and image_size is not None:
        predicted = normalize_boxes(predicted, *image_size)
    parts = accuracy_score(predicted, truth, settings["det_reward_ratio"], threshold)
    form = format_score(response)
    weights = settings["accuracy_ratio"] + settings["format_ratio"]
    score = (settings["accuracy_ratio"] * parts["accuracy"] + settings["format_ratio"] * form) / weights
    return {"score": score, "format": form, "no_boxes": float(predicted is None), **parts}


class DetectionRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        args = dict(self.worker_config.reward_args)
        unknown = sorted(set(args) - set(REWARD_ARGS))
        if unknown:
            raise ValueError(f"{self.worker_name}.reward_args has unknown keys {unknown}; valid: {list(REWARD_ARGS)}")
        # ROLL reads the threshold from the environment variable DET_IOU_THRESHOLD (system_envs); reward_args wins
        threshold = args.get("iou_threshold", os.environ.get("DET_IOU_THRESHOLD", "average"))
        try:
            threshold = float(threshold) if threshold not in ("average", "dynamic") else threshold
        except (TypeError, ValueError):
            pass
        if threshold not in THRESHOLDS:
            raise ValueError(
                f"{self.worker_name}: iou_threshold (reward_args or DET_IOU_THRESHOLD) = {threshold!r}; valid: "
                f"{list(THRESHOLDS)}"
            )
        self.iou_threshold, self.total_steps = threshold, total_steps
        self.defaults = {
            "format_ratio": args.get("format_ratio", 0.1),
            "accuracy_ratio": args.get("accuracy_ratio", 1.0),
            "det_reward_ratio": args.get("det_reward_ratio", DEFAULT_DET_RATIO),
            "det_verifier_normalized": args.get("det_verifier_normalized", False),
        }
        row_settings(None, self.defaults, f"{self.worker_name}.reward_args")  # bad defaults fail here, not per row
        self.patch_size = self._absolute_coordinates_patch()

    def _absolute_coordinates_patch(self) -> int | None:
        """The vision patch size when the policy (model_args) answers in absolute pixels (Qwen2.5-VL), else None."""
        path = getattr(getattr(self.worker_config, "model_args", None), "model_name_or_path", None)
        self.knows_policy = bool(path)
        if not path:
            return None
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path)
        if config.model_type not in ABSOLUTE_COORDINATE_MODELS:
            return None
        vision = getattr(config, "vision_config", None) or getattr(config.thinker_config, "vision_config", None)
        return int(vision.patch_size)

    def _image_size(self, batch: DataProto, row: int, where: str) -> tuple[float, float]:
        inputs = batch.non_tensor_batch.get("multi_modal_inputs")
        grid = None if inputs is None or inputs[row] is None else inputs[row].get("image_grid_thw")
        if grid is None or len(grid) == 0:
            raise RewardDataError(
                f"{where}: det_verifier_normalized on a Qwen2.5-VL policy needs the row's image size, but the "
                "batch carries no multi_modal_inputs image_grid_thw for it"
            )
        _, height, width = (int(v) for v in grid[0])  # the first image's (t, h, w) in patches
        return width * self.patch_size, height * self.patch_size

    def score(self, batch: DataProto) -> list[float]:
        """Each row graded by grade_detection within rewards.<domain>.timeout (roll.workers.rewards.base)."""
        columns = batch.non_tensor_batch
        threshold = select_threshold(self.iou_threshold, batch.meta_info.get("global_step"), self.total_steps)
        reward_models = columns.get("reward_model")
        truths = []
        for row, truth in enumerate(columns["ground_truth"]):
            where = f"{self.worker_name} row {row}"
            settings = row_settings(None if reward_models is None else reward_models[row], self.defaults, where)
            if settings["normalized"] and not self.knows_policy:
                raise RewardDataError(
                    f"{where}: det_verifier_normalized is true, but {self.worker_name}.model_args.model_name_or_path "
                    "is unset: set it to the policy's model directory (as ROLL's YAMLs do, ${pretrain}) so the "
                    "reward knows whether the policy answers in pixels (Qwen2.5-VL) or in 0-1000"
                )
            size = self._image_size(batch, row, where) if settings["normalized"] and self.patch_size else None
            truths.append((row, truth, settings, size))
        details = {}

        def grade(response, row_truth):
            row, truth, settings, size = row_truth
            try:
                details[row] = grade_detection(response, truth, settings, threshold, size)
            except RewardDataError as error:
                raise RewardDataError(f"{self.worker_name} row {row}: {error}") from None
            return details[row]["score"]

        scores = self.grade_rows(batch, grade, truths=truths)
        for name in ("format", "accuracy", "size_penalty"):  # rows that failed to grade count 0
            self.record_metric(name, [details.get(row, {}).get(name, 0.0) for row in range(len(batch))])
        self.record_metric("no_boxes", [details.get(row, {}).get("no_boxes", 0.0) for row in range(len(batch))], "sum")
        return scores
