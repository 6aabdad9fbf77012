"""The broken-inputs corpus (tests/broken_inputs/): every deliberately broken config, YAML, model directory,
plugin or data file is refused through the launcher (examples/start_*_pipeline.py, run in this process) with
exit status 2 and one message (a line; `lines: N` for a list of several problems) that names the key, file, row
or class and says what would be valid, never a traceback, and before Ray starts.

Each `tests/broken_inputs/<case>.yaml` holds Hydra `overrides` on examples/tiny_rlvr/rlvr_tiny.yaml (with the
demo's model and data and tests/pipeline/helpers.py's SMALL_RUN; `pipeline: agentic`: on
examples/agentic_demo/frozen_lake_traj.yaml with SMALL_AGENTIC, or `config: <dir>/<name>`: another YAML) and the
texts the message must `expect`. `at: dry_run` (the default): `--dry_run` refuses it, as everything the dry run
can know; `at: start`: the run refuses it at start-up (the pipeline's checks, with Ray's start replaced by an
error). Placeholders: {data} = tests/broken_inputs/data, {configs} = tests/broken_inputs/configs, {tmp} = an
empty directory, {models} = broken copies of the demo model, {checkpoints} = prepared checkpoint directories,
{readonly} = a read-only directory (a read-only tmpfs as root, where permissions do not stop root), {locked} = a
directory another holder has locked, {generated} = files made here (a binary "YAML", a FIFO, a link to /dev/zero).
"""

import json
import logging
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import save_file

from roll.distributed import ray_utils
from roll.pipeline import base
from roll.pipeline.core.checkpointing import STATE_FILE
from roll.utils import checkpoint
from tests.pipeline.helpers import AGENTIC_DEMO, SMALL_AGENTIC, SMALL_RUN, TINY_RLVR, data_overrides, make_config
from tests.reliability.test_launcher import launcher

CORPUS = Path(__file__).resolve().parents[1] / "broken_inputs"
CASES = sorted(CORPUS.glob("*.yaml"))
MESSAGE_STARTS = ("config error: ", "error: ")


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
    other_shapes = checkpoints / "other_shapes" / "checkpoints" / "step-1"  # complete, trained on a narrower model
    (other_shapes / "actor_train" / "hf").mkdir(parents=True)
    save_file(
        {"model.embed_tokens.weight": torch.zeros(376, 32)}, other_shapes / "actor_train" / "hf" / "model.safetensors"
    )
    same_plan = make_config(small_demo, root / "same")
    torch.save({"completed_steps": 1, "config": same_plan.fingerprint()}, other_shapes / STATE_FILE)
    checkpoint.write_manifest(other_shapes)
    earlier = checkpoints / "earlier_run"  # an earlier run's complete checkpoints
    for step in (1, 2):
        (checkpoint.staging_dir(str(earlier), step) / STATE_FILE).write_bytes(b"state")
        checkpoint.commit(str(earlier), step)
    (root / "tmp").mkdir()
    broken_models(small_demo / "model", models)
    generated = root / "generated"
    generated.mkdir()
    (generated / "binary.yaml").write_bytes((small_demo / "model" / "model.safetensors").read_bytes()[:4096])
    os.mkfifo(generated / "prompts.jsonl")
    (generated / "zero.jsonl").symlink_to("/dev/zero")
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
            "configs": CORPUS / "configs",
            "generated": generated,
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


def broken_models(model: Path, models: Path) -> None:
    """Copies of the demo model, each broken in one way a careless copy or edit breaks one."""

    def variant(name: str, config=None, template=None):
        shutil.copytree(model, models / name)
        if config is not None:
            settings = json.loads((model / "config.json").read_text())
            (models / name / "config.json").write_text(
                config if isinstance(config, str) else json.dumps({**settings, **config})
            )
        if template is not None:
            (models / name / "chat_template.jinja").write_text(template)

    variant("broken_config", config='{"model_type": "qwen2", "hidden_size": 64,\n "vocab_size": }\n')
    variant("unknown_type", config={"model_type": "qwen9"})
    variant("unknown_arch", config={"architectures": ["Qwen9ForCausalLM"]})
    variant("other_shapes", config={"hidden_size": 128})
    variant("bad_template", template="{% for m in messages %}{{ m['content'] }{% endfor %}")
    variant("raising_template", template="{{ raise_exception('this template only takes system messages') }}")


def test_the_corpus_has_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_broken_input_is_refused_with_one_message(case, small_demo, places, tmp_path, capsys, monkeypatch):
    spec = yaml.safe_load(case.read_text())
    at = spec.get("at", "dry_run")
    assert at in ("dry_run", "start"), f"{case.stem}: 'at' is dry_run or start"

    def place(text: str) -> str:
        for name, path in places.items():
            text = text.replace("{" + name + "}", str(path))
        return text

    def no_ray(*args, **kwargs):
        raise ReachedRay("the broken input passed every start-up check")

    monkeypatch.setattr(base, "init_ray", no_ray)
    monkeypatch.setattr(ray_utils, "start_local_ray_early", lambda *args: False)
    monkeypatch.setenv("RAY_ADDRESS", "local")  # no cluster of another user's to attach to: a local Ray's one node
    # a log handler made while an earlier test captured stderr writes to that closed stream: no "Logging error"
    monkeypatch.setattr(logging, "raiseExceptions", False)
    if spec.get("pipeline") == "agentic":
        script, config_path, config_name = "start_agentic_pipeline", AGENTIC_DEMO, "frozen_lake_traj"
        base_overrides = [f"model_path={small_demo / 'model'}", *SMALL_AGENTIC]
    else:
        script, config_path, config_name = "start_rlvr_pipeline", TINY_RLVR, "rlvr_tiny"
        base_overrides = [*data_overrides(small_demo), *SMALL_RUN]
    if "config" in spec:
        config_path, _, config_name = place(spec["config"]).rpartition("/")
    args = ["--config_path", str(config_path), "--config_name", config_name]
    args += ["--dry_run"] if at == "dry_run" else []
    args += [*base_overrides, f"output_dir={tmp_path / 'out'}", *(place(o) for o in spec.get("overrides", []))]
    try:
        status = launcher(script).main(args)
    except ReachedRay:
        pytest.fail(f"{case.stem}: not refused before Ray starts")
    err = capsys.readouterr().err
    assert status == 2, f"{case.stem}: {'--dry_run' if at == 'dry_run' else 'the run'} was not refused:\n{err}"
    assert "Traceback" not in err, f"{case.stem}: a traceback instead of a message:\n{err}"
    lines = err.splitlines()  # a library's one-time warnings may come first: the refusal is the rest
    first = next(i for i, line in enumerate(lines) if line.startswith(MESSAGE_STARTS))
    message = "\n".join(lines[first:])
    assert len(lines) - first == spec.get("lines", 1), f"{case.stem}: not one message:\n{message}"
    assert len(message) < 3000, f"{case.stem}: a {len(message)}-character message"
    for text in spec["expect"]:
        assert text in message, f"{case.stem}: {text!r} is not in the message:\n{message}"
