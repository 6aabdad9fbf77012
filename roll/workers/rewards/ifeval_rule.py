"""IFEval-style general rule reward: the fraction of a row's verifiable instructions the response follows.

The checks are the maintained IFEval implementation of the `if-verifiable` package (25 instruction types:
keywords, word/sentence/paragraph counts, JSON and other formats, case, language, …), strict mode. A row's
`ground_truth` is a JSON object as in IFEval's data:
`{"instruction_id_list": ["punctuation:no_comma", ...], "kwargs": [{}, ...]}` (one kwargs dict per id).

Two checks of the package want NLTK data files (the punkt sentence model, and punkt_tab for
`word_tokenize`), which no PyPI package ships and which cannot be downloaded at run time. Here sentences
are split by NLTK's Punkt tokenizer with default (untrained) parameters and words by `word_tokenize` with
`preserve_line=True`; both need no data. Counts differ from trained punkt only around abbreviations.
"""

import functools
import json
import types

import nltk
import numpy as np
from if_verifiable.common import evaluate_instructions
from if_verifiable.ifeval import instructions_util
from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.base import RewardWorker

# the package's module-level nltk, with the two data-free replacements described above
instructions_util._get_sentence_tokenizer = functools.lru_cache(maxsize=None)(nltk.tokenize.PunktSentenceTokenizer)
instructions_util.nltk = types.SimpleNamespace(
    tokenize=nltk.tokenize, word_tokenize=functools.partial(nltk.word_tokenize, preserve_line=True)
)
ROW_EXAMPLE = '{"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}'


def parse_instructions(ground_truth) -> tuple[list[str], list[dict]]:
    """(instruction ids, kwargs) of a row; RewardDataError naming what is wrong otherwise."""
    try:
        spec = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    except json.JSONDecodeError as error:
        raise RewardDataError(
            f"ifeval reward: ground_truth is not JSON ({error}); expected e.g. {ROW_EXAMPLE}"
        ) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("instruction_id_list"), list):
        raise RewardDataError(
            f"ifeval reward: ground_truth {ground_truth!r} has no instruction_id_list; e.g. {ROW_EXAMPLE}"
        )
    ids = spec["instruction_id_list"]
    kwargs = spec.get("kwargs") or [{} for _ in ids]
    if len(kwargs) != len(ids) or not all(isinstance(k, dict) for k in kwargs):
        raise RewardDataError(
            f"ifeval reward: 'kwargs' must be one dict per instruction id ({len(ids)}), got {kwargs!r}"
        )
    unknown = [i for i in ids if i not in INSTRUCTION_DICT]
    if unknown or not ids:
        raise RewardDataError(
            f"ifeval reward: unknown instruction ids {unknown or '(none given)'}; valid: {sorted(INSTRUCTION_DICT)}"
        )
    return ids, kwargs


def grade_ifeval(response: str, ground_truth, prompt: str = "") -> float:
    ids, kwargs = parse_instructions(ground_truth)
    _, scores = evaluate_instructions(response, ids, kwargs, prompt, INSTRUCTION_DICT)
    return scores.partial_strict


class GeneralRuleRewardWorker(RewardWorker):
    """reward_args.all_or_nothing: true scores 1 only when every instruction is followed (IFEval's
    prompt-level accuracy); default false gives the followed fraction (instruction level)."""

    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    def score(self, batch: DataProto) -> list[float]:
        all_or_nothing = bool(self.worker_config.reward_args.get("all_or_nothing", False))
        columns = batch.non_tensor_batch
        prompts = columns.get("prompt_text", [""] * len(batch))
        # each row's prompt rides on its ground truth (some checks, e.g. combination:repeat_prompt, read it)
        truths = np.array([_Truth(t, p) for t, p in zip(columns["ground_truth"], prompts)], dtype=object)
        rows = DataProto(batch=batch.batch, non_tensor_batch={**columns, "ground_truth": truths}, meta_info={})

        def grade(response, truth):
            value = grade_ifeval(response, str(truth), truth.prompt)
            return float(value == 1.0) if all_or_nothing else value

        return self.grade_rows(rows, grade)


class _Truth(str):
    """A row's ground truth string that also carries the row's prompt."""

    def __new__(cls, truth, prompt):
        made = super().__new__(cls, "" if truth is None else truth)
        made.prompt = prompt or ""
        return made
