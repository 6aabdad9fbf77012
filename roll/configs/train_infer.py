"""`train_infer_correction` (ROLL's key and meaning): filters that drop response tokens whose training and
rollout probabilities disagree, and an IS weight from the same ratio, at token, turn (segment), row-geometric or
row-product level. The maths is roll.algorithms.train_infer; docs/rollout_correction.md §7.7 explains it."""

from dataclasses import dataclass
from typing import Literal

from roll.configs.loader import ConfigError, field_help

Level = Literal["token", "segment", "geometric", "sequence"]


@dataclass
class TrainInferISWeightConfig:
    enabled: bool = field_help(
        False, "multiply each token's policy loss by the train/infer ratio π_train/π_rollout at weight_type's level"
    )
    weight_type: Level = field_help(
        "token",
        "token: exp(ℓ_t); segment: exp(mean ℓ over the token's turn); geometric: exp(mean ℓ over the row); "
        "sequence: exp(Σ ℓ over the row), with ℓ = old_log_probs − rollout_log_probs",
    )
    upper_bound: float | None = field_help(
        1.2, "clamp the weight to [0, upper_bound]; null = no clamp", bounds="(0, inf)"
    )
    detach: bool = field_help(
        True, "ROLL's switch to stop gradients through the weight; both log-probs are constants here, so no effect"
    )


@dataclass
class TrainInferFilterConfig:
    enabled: bool = field_help(False, "apply this filter to the loss mask (its metrics are logged either way)")
    agg_type: Level = field_help("token", "the level the ratio and the difference are taken at (as weight_type)")
    ratio_enabled: bool = field_help(True, "keep a token only if ratio_low ≤ π_train/π_rollout ≤ ratio_high")
    ratio_low: float = field_help(0.8, "lower bound of the kept ratio", bounds="[0, inf)")
    ratio_high: float = field_help(1.2, "upper bound of the kept ratio", bounds="[0, inf)")
    diff_enabled: bool = field_help(False, "keep a token only if diff_low ≤ π_train − π_rollout ≤ diff_high")
    diff_low: float = field_help(-0.2, "lower bound of the kept probability difference", bounds="(-inf, inf)")
    diff_high: float = field_help(0.2, "upper bound of the kept probability difference", bounds="(-inf, inf)")


@dataclass
class TrainInferCorrectionConfig:
    is_weight: TrainInferISWeightConfig = field_help(
        default_factory=TrainInferISWeightConfig, help="the IS weight (off by default)"
    )
    filters: list[TrainInferFilterConfig] = field_help(
        default_factory=list,
        help="filters applied one after the other to the loss mask (response_mask) after the advantages are "
        "computed; a token is kept when every enabled filter keeps it",
    )

    @property
    def active(self) -> bool:
        return self.is_weight.enabled or any(f.enabled for f in self.filters)

    def __post_init__(self):
        for i, f in enumerate(self.filters):
            for kind in ("ratio", "diff"):
                low, high = getattr(f, f"{kind}_low"), getattr(f, f"{kind}_high")
                if getattr(f, f"{kind}_enabled") and low > high:
                    raise ConfigError(
                        f"'train_infer_correction.filters[{i}].{kind}_low' = {low} > {kind}_high = {high}: the filter "
                        "would drop every token"
                    )
