"""ROLL's single-question environments over a dataset: `roll_math` (ROLL's GEM MathEnv: a \\boxed{} answer graded
by math-verify) and `roll_qa` (ROLL's GEM QaEnv: an <answer>…</answer> graded by normalised exact match).

Each episode draws one row by its seed; the first observation is the row's question; the first reply that
reaches the environment ends the episode with reward 1.0 (correct) or 0.0. With a tool wrapper the model can
call tools before that reply. The dataset is read at the first episode, never when the config is checked
(`--dry_run` downloads nothing): `dataset_name` is a local file or folder (json/jsonl/csv/parquet/arrow) or a
Hugging Face Hub dataset id, which `datasets` fetches then."""

import random
import re
import string
import threading
from pathlib import Path

from roll.agentic.envs.base import BaseEnv, EnvStep, check_positive_int
from roll.agentic.envs.registry import register_env
from roll.utils.grading import grade_with_time_limit
from roll.utils.math_grader import grade_math, last_boxed

BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
_DATASETS: dict[tuple[str, str | None], object] = {}  # one copy per process, shared by its environments
_LOCK = threading.Lock()
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def load_rows(name: str, split: str | None, where: str):
    """The dataset `name` (local path or Hub id), one split: `split`, or the only one there is (GEM's rule)."""
    import datasets

    key = (name, split)
    with _LOCK:
        if key not in _DATASETS:
            path = Path(name)
            files = sorted(str(p) for p in path.iterdir() if p.suffix in BUILDERS) if path.is_dir() else [name]
            if path.exists():
                kinds = {BUILDERS.get(Path(f).suffix.lower()) for f in files}
                if not files or len(kinds) != 1 or None in kinds:
                    raise ValueError(
                        f"{where}.dataset_name = {name!r}: expected files of one kind among {sorted(BUILDERS)}"
                    )
                loaded = datasets.load_dataset(kinds.pop(), data_files=files)
            else:  # a Hugging Face Hub dataset id
                loaded = datasets.load_dataset(name)
            if split is None and len(loaded) != 1:
                raise ValueError(f"{where}.split is null but {name!r} has the splits {sorted(loaded)}; name one")
            if split is not None and split not in loaded:
                raise ValueError(f"{where}.split = {split!r}: {name!r} has the splits {sorted(loaded)}")
            _DATASETS[key] = loaded[split if split is not None else next(iter(loaded))]
        return _DATASETS[key]


class DatasetQuestionEnv(BaseEnv):
    name = ""
    reset_in_driver = False  # reset reads the dataset (a Hub download): not in the driver or --dry_run
    default_config = {
        "dataset_name": "",
        "split": None,  # null = the dataset's only split
        "question_key": "question",
        "answer_key": "answer",
        "seed": 0,  # ROLL's key: the seed of each episode decides the row here
        "max_steps": 1,  # ROLL's env_config.max_steps: ROLL's env ignores it (custom_envs.<tag>.max_steps counts turns)
    }

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.where = f"{self.name} env_config"
        for key in ("dataset_name", "question_key", "answer_key"):
            if not isinstance(self.config[key], str) or not self.config[key]:
                raise ValueError(f"{self.where}.{key} must be a non-empty string, got {self.config[key]!r}")
        if self.config["split"] is not None and not isinstance(self.config["split"], str):
            raise ValueError(f"{self.where}.split must be a string or null, got {self.config['split']!r}")
        check_positive_int(self, "max_steps")
        name = self.config["dataset_name"]
        if name.startswith((".", "/")) or Path(name).suffix.lower() in BUILDERS:  # meant as a local path
            if not Path(name).exists():
                raise ValueError(f"{self.where}.dataset_name = {name!r}: no such file or folder")
        self.rows = None
        self.done = True

    def reset(self, seed: int) -> str:
        if self.rows is None:
            self.rows = load_rows(self.config["dataset_name"], self.config["split"], self.where)
            for key in ("question_key", "answer_key"):
                if self.config[key] not in self.rows.column_names:
                    raise ValueError(
                        f"{self.where}.{key} = {self.config[key]!r} is not a column of "
                        f"{self.config['dataset_name']!r}; its columns: {self.rows.column_names}"
                    )
        row = self.rows[random.Random(seed).randrange(len(self.rows))]
        self.answer = row[self.config["answer_key"]]
        if self.answer is None:
            raise ValueError(f"{self.config['dataset_name']!r}: a row has no {self.config['answer_key']!r}")
        self.done = False
        return str(row[self.config["question_key"]])

    def step(self, action: str) -> EnvStep:
        if self.done:
            raise RuntimeError(f"{self.name}: step() called on a finished episode; call reset(seed) first")
        self.done = True
        answer = self.extract(action)
        correct = answer is not None and self.correct(answer)
        info = {"action_is_valid": answer is not None, "success": correct}
        return EnvStep("", 1.0 if correct else 0.0, True, info)

    def extract(self, action: str) -> str | None:
        raise NotImplementedError

    def correct(self, answer: str) -> bool:
        raise NotImplementedError


@register_env("roll_math")
class MathEnv(DatasetQuestionEnv):
    name = "roll_math"
    default_config = {**DatasetQuestionEnv.default_config, "question_key": "problem"}
    grade_timeout_s = 1.0  # ROLL grades each answer with a 1 s limit (0 past it)

    def extract(self, action: str) -> str | None:
        return last_boxed(action)

    def correct(self, answer: str) -> bool:
        args = (f"\\boxed{{{answer}}}", str(self.answer), True)
        return grade_with_time_limit(grade_math, args, self.grade_timeout_s)[0] == 1.0


@register_env("roll_qa")
class QaEnv(DatasetQuestionEnv):
    name = "roll_qa"
    default_config = {**DatasetQuestionEnv.default_config, "extract_boxed": False, "load_from_cache_file": True}

    def extract(self, action: str) -> str | None:
        if self.config["extract_boxed"]:
            return last_boxed(action)
        found = ANSWER_RE.findall(action)
        return found[-1] if found else None

    def correct(self, answer: str) -> bool:
        golds = self.answer if isinstance(self.answer, list) else [self.answer]
        return normalise(answer) in {normalise(str(gold)) for gold in golds}


def normalise(text: str) -> str:
    """SQuAD-style: lower case, no punctuation, no articles, single spaces (ROLL's exact-match rule)."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())
