"""The broken-inputs corpus (tests/broken_inputs/): every deliberately broken config or data file fails
before any training step — in config loading or in the pipeline's start-up checks, before Ray starts —
with one message that names the key, file, row or class and says what would be valid.

Each `tests/broken_inputs/<case>.yaml` holds Hydra `overrides` on examples/tiny_rlvr/rlvr_tiny.yaml (with the
demo's model and data and tests/pipeline/helpers.py's SMALL_RUN) and the texts the error must `expect`.
Placeholders: {data} = tests/broken_inputs/data, {tmp} = an empty directory, {models} = broken copies of the
demo model, {checkpoints} = prepared checkpoint directories.
"""

import shutil
import traceback
from pathlib import Path

import pytest
import torch
import yaml

from roll.pipeline.core.checkpointing import STATE_FILE, config_fingerprint
from roll.utils import checkpoint
from tests.pipeline.helpers import make_config

CORPUS = Path(__file__).resolve().parents[1] / "broken_inputs"
CASES = sorted(CORPUS.glob("*.yaml"))
ROLL = Path(__file__).resolve().parents[2] / "roll"


class ReachedRay(Exception):
    """Raised instead of starting Ray: the case passed every start-up check."""


@pytest.fixture(scope="module")
def places(small_demo, tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    models = root / "models"
    for variant, drop in (
        ("no_tokenizer", ("tokenizer", "vocab", "merges", "special_tokens")),
        ("no_config", ("config",)),
    ):
        shutil.copytree(small_demo / "model", models / variant)
        for path in (models / variant).iterdir():
            if path.name.startswith(drop) and not path.name.startswith("generation_config"):
                path.unlink()
    checkpoints = root / "checkpoints"
    partial = checkpoints / "partial" / "checkpoints" / "step-1"  # a step directory without its manifest
    partial.mkdir(parents=True)
    torch.save({"completed_steps": 1}, partial / STATE_FILE)
    other = checkpoints / "other_config" / "checkpoints" / "step-1"  # complete, from another batch plan
    other.mkdir(parents=True)
    saved_by = make_config(small_demo, root / "other", ["rollout_batch_size=64"])
    torch.save({"completed_steps": 1, "config": config_fingerprint(saved_by)}, other / STATE_FILE)
    checkpoint.write_manifest(other)
    (root / "tmp").mkdir()
    return {"data": CORPUS / "data", "tmp": root / "tmp", "models": models, "checkpoints": checkpoints}


def test_the_corpus_has_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_broken_input_fails_at_start_up_with_a_clear_message(case, small_demo, places, tmp_path, monkeypatch):
    from roll.pipeline import base
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    spec = yaml.safe_load(case.read_text())
    overrides = []
    for override in spec["overrides"]:
        for name, path in places.items():
            override = override.replace("{" + name + "}", str(path))
        overrides.append(override)

    def no_ray(*args, **kwargs):
        raise ReachedRay("the broken input passed every start-up check")

    monkeypatch.setattr(base, "init_ray", no_ray)
    with pytest.raises(Exception) as caught:
        RLVRPipeline(make_config(small_demo, tmp_path / "out", overrides)).close()
    error = caught.value
    assert not isinstance(error, ReachedRay), f"{case.stem}: not refused before Ray starts"
    message = str(error)
    for text in spec["expect"]:
        assert text in message, f"{case.stem}: {text!r} is not in the message:\n{message}"
    raised_in = traceback.extract_tb(error.__traceback__)[-1].filename
    assert Path(raised_in).resolve().is_relative_to(ROLL), (
        f"{case.stem}: raised inside a library ({raised_in}), not by roll with a message:\n{message}"
    )
