"""The broken-inputs corpus (tests/broken_inputs/): every deliberately broken config or data file fails
before any training step — in config loading or in the pipeline's start-up checks, before Ray starts —
with one message that names the key, file, row or class and says what would be valid.

Each `tests/broken_inputs/<case>.yaml` holds Hydra `overrides` on examples/tiny_rlvr/rlvr_tiny.yaml (with the
demo's model and data and tests/pipeline/helpers.py's SMALL_RUN) and the texts the error must `expect`.
Placeholders: {data} = tests/broken_inputs/data, {tmp} = an empty directory, {models} = broken copies of the
demo model, {checkpoints} = prepared checkpoint directories, {readonly} = a read-only directory (a read-only
tmpfs as root, where permissions do not stop root), {locked} = a directory another holder has locked.
"""

import json
import os
import shutil
import subprocess
import traceback
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from roll.pipeline.core.checkpointing import STATE_FILE
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
    shutil.copytree(small_demo / "model", models / "truncated_weights")
    weights = models / "truncated_weights" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # an interrupted copy
    shutil.copytree(small_demo / "model", models / "no_chat_template")
    (models / "no_chat_template" / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer_config = models / "no_chat_template" / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    settings.pop("chat_template", None)
    tokenizer_config.write_text(json.dumps(settings))
    checkpoints = root / "checkpoints"
    partial = checkpoints / "partial" / "checkpoints" / "step-1"  # a step directory without its manifest
    partial.mkdir(parents=True)
    torch.save({"completed_steps": 1}, partial / STATE_FILE)
    other = checkpoints / "other_config" / "checkpoints" / "step-1"  # complete, from another batch plan
    other.mkdir(parents=True)
    saved_by = make_config(small_demo, root / "other", ["rollout_batch_size=64"])
    torch.save({"completed_steps": 1, "config": saved_by.fingerprint()}, other / STATE_FILE)
    checkpoint.write_manifest(other)
    earlier = checkpoints / "earlier_run"  # an earlier run's complete checkpoints
    for step in (1, 2):
        (checkpoint.staging_dir(str(earlier), step) / STATE_FILE).write_bytes(b"state")
        checkpoint.commit(str(earlier), step)
    (root / "tmp").mkdir()
    from roll.pipeline.core.output_dir import claim_output_dirs

    locked = SimpleNamespace(output_dir=str(root / "locked"), checkpoint_dir=None, resume_from_checkpoint=False)
    holder = claim_output_dirs(locked)  # as a running pipeline holds its output_dir
    with read_only_dir(root / "readonly") as readonly:
        yield {
            "data": CORPUS / "data",
            "tmp": root / "tmp",
            "models": models,
            "checkpoints": checkpoints,
            "readonly": readonly,
            "locked": root / "locked",
        }
    holder.release()


@contextmanager
def read_only_dir(path: Path):
    """A directory nobody can write into: a read-only tmpfs when root may mount (root ignores permission bits),
    else mode 0555 for a non-root user."""
    path.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], check=True)
        try:
            yield path
        finally:
            subprocess.run(["umount", str(path)], check=True)
    else:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


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
