"""Box matching for the detection reward: IoU, the two greedy matchings, the IoU score and COCO's mAP on one image.

A box is `(label, (x1, y1, x2, y2))` with x1 ≤ x2 and y1 ≤ y2. Pure functions of their arguments (no config,
no I/O); roll.workers.rewards.detection combines them into ROLL's detection score.
"""

import numpy as np

# The IoU thresholds of the IoU score (ROLL's list) and COCO's ten AP thresholds 0.50:0.05:0.95
IOU_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
COCO_IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
COCO_RECALL_POINTS = np.linspace(0.0, 1.0, 101)
COCO_MAX_DETECTIONS = 100


def iou_matrix(predicted, truth) -> np.ndarray:
    """IoU of every (predicted, true) pair of boxes: shape (len(predicted), len(truth))."""
    p = np.array([box for _, box in predicted], dtype=float).reshape(-1, 1, 4)
    t = np.array([box for _, box in truth], dtype=float).reshape(1, -1, 4)
    width = np.minimum(p[..., 2], t[..., 2]) - np.maximum(p[..., 0], t[..., 0])
    height = np.minimum(p[..., 3], t[..., 3]) - np.maximum(p[..., 1], t[..., 1])
    inter = np.where((width > 0) & (height > 0), width * height, 0.0)
    area_p = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    area_t = (t[..., 2] - t[..., 0]) * (t[..., 3] - t[..., 1])
    union = area_p + area_t - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=inter > 0)


def same_labels(predicted, truth) -> np.ndarray:
    """Whether each (predicted, true) pair has the same label, case-insensitively."""
    return np.array([[p[0].lower() == t[0].lower() for t in truth] for p in predicted], dtype=bool).reshape(
        len(predicted), len(truth)
    )


def match_max_iou_first(ious: np.ndarray, same: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """Greedy matching by IoU alone: repeatedly pair the unmatched (predicted, true) boxes of the largest IoU
    (the first such pair in (predicted, true) order on ties) until it is below `threshold`. A pair counts its
    IoU when the labels agree (`same`), else 0. Returns (predicted index, true index, credited IoU).

    ROLL's loop means the same but, its loop variables shadowing the argmax, pairs the LAST unmatched boxes
    with the largest IoU's value (docs/roll_compatibility.md)."""
    free = ious.astype(float).copy()
    matches = []
    for _ in range(min(free.shape)):
        p, t = np.unravel_index(int(np.argmax(free)), free.shape)
        if free[p, t] < threshold:
            break
        matches.append((int(p), int(t), float(ious[p, t]) if same[p, t] else 0.0))
        free[p, :] = -np.inf
        free[:, t] = -np.inf
    return matches


def match_label_first(ious: np.ndarray, same: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """Greedy matching within labels: each true box in order takes the unmatched predicted box of its label
    with the largest IoU (the first on ties), when that IoU reaches `threshold`."""
    matches, taken = [], np.zeros(ious.shape[0], dtype=bool)
    for t in range(ious.shape[1]):
        candidates = np.flatnonzero(same[:, t] & ~taken)
        if candidates.size == 0:
            continue
        best = candidates[int(np.argmax(ious[candidates, t]))]
        if ious[best, t] >= threshold:
            matches.append((int(best), t, float(ious[best, t])))
            taken[best] = True
    return matches


MATCHINGS = {"iou_max_iou_first": match_max_iou_first, "iou_max_label_first": match_label_first}


def iou_score(predicted, truth, matches, completeness_weight: float) -> dict:
    """ROLL's IoU score of one matching: mean credited IoU over the true boxes, completeness
    1 − (miss rate + false-alarm rate)/2, and their blend (1 − w)·mean IoU + w·completeness."""
    mean_iou = sum(m[2] for m in matches) / len(truth) if matches else 0.0
    miss = (len(truth) - len(matches)) / len(truth)
    false_alarm = (len(predicted) - len(matches)) / len(predicted) if predicted else 0.0
    completeness = 1.0 - (miss + false_alarm) / 2.0
    return {
        "mean_iou": mean_iou,
        "completeness": completeness,
        "precision": 1.0 - false_alarm,
        "recall": 1.0 - miss,
        "weighted": mean_iou * (1.0 - completeness_weight) + completeness * completeness_weight,
    }


def iou_scores(predicted, truth, matching: str, completeness_weight: float) -> dict:
    """The weighted IoU score of `matching` at every threshold of IOU_THRESHOLDS, and "average": their mean."""
    match, ious, same = MATCHINGS[matching], iou_matrix(predicted, truth), same_labels(predicted, truth)
    scores = {
        threshold: iou_score(predicted, truth, match(ious, same, threshold), completeness_weight)["weighted"]
        for threshold in IOU_THRESHOLDS
    }
    scores["average"] = sum(scores.values()) / len(IOU_THRESHOLDS)
    return scores


def _average_precision(ious: np.ndarray, threshold: float) -> float:
    """COCO's 101-point interpolated AP of one category on one image: detections in their given order (all of
    confidence 1), each matched to the free true box of largest IoU ≥ threshold."""
    detections, truths = ious.shape
    taken = np.zeros(truths, dtype=bool)
    hit = np.zeros(detections, dtype=bool)
    for d in range(detections):
        best, limit = -1, min(threshold, 1 - 1e-10)
        for t in range(truths):
            if not taken[t] and ious[d, t] >= limit:
                best, limit = t, ious[d, t]
        if best >= 0:
            taken[best], hit[d] = True, True
    if detections == 0:
        return 0.0
    true_pos = np.cumsum(hit).astype(float)
    false_pos = np.cumsum(~hit).astype(float)
    recall = true_pos / truths
    precision = true_pos / (true_pos + false_pos + np.spacing(1))
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # the precision envelope, right to left
    index = np.searchsorted(recall, COCO_RECALL_POINTS, side="left")
    sampled = np.where(index < detections, precision[np.minimum(index, detections - 1)], 0.0)
    return float(sampled.mean())


def coco_map(predicted, truth) -> dict:
    """COCO's bbox mAP of one image as pycocotools computes it (area range "all", 100 detections per category,
    every confidence 1): {"map": AP@[.50:.95], "map50": AP@.50, "map75": AP@.75}, each a mean over the true
    boxes' labels. Predicted boxes of labels no true box has are left out (not false positives); none left: 0."""
    labels = list(dict.fromkeys(label for label, _ in truth))
    kept = [box for box in predicted if box[0] in labels]
    if not kept:
        return {"map": 0.0, "map50": 0.0, "map75": 0.0}
    table = np.zeros((len(COCO_IOU_THRESHOLDS), len(labels)))
    for k, label in enumerate(labels):
        ious = iou_matrix(
            [box for box in kept if box[0] == label][:COCO_MAX_DETECTIONS], [box for box in truth if box[0] == label]
        )
        for i, threshold in enumerate(COCO_IOU_THRESHOLDS):
            table[i, k] = _average_precision(ious, threshold)
    return {"map": float(table.mean()), "map50": float(table[0].mean()), "map75": float(table[5].mean())}
