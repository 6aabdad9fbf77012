import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from roll.pipeline.core.checkpointing import STATE_FILE, PipelineCheckpointer
from roll.pipeline.core.old_log_probs import OldLogProbs
from roll.utils import checkpoint
from roll.utils.seeding import get_rng_state, set_rng_state, set_seed
from roll.workers.checkpointing import CheckpointMixin
from tests.configs.test_config import tiny as tiny_config


def test_commit_is_atomic_and_latest_points_to_newest(tmp_path):
    out = str(tmp_path)
    assert checkpoint.find_checkpoint(out, True) is None
    staged = checkpoint.staging_dir(out, 3)
    (staged / "a.txt").write_text("x")
    # an interrupted save of step 5 leaves only a .tmp directory: resume must ignore it
    checkpoint.staging_dir(out, 5)
    checkpoint.commit(out, 3)
    assert checkpoint.find_checkpoint(out, True).name == "step-3"
    assert checkpoint.find_checkpoint(out, False) is None
    assert (checkpoint.find_checkpoint(out, True) / "a.txt").read_text() == "x"


def test_saving_a_step_again_replaces_it_and_a_dangling_latest_is_an_error(tmp_path):
    out = str(tmp_path)
    for content in ("old", "new"):  # a run restarted from an earlier checkpoint saves step 2 again
        (checkpoint.staging_dir(out, 2) / "a.txt").write_text(content)
        checkpoint.commit(out, 2)
    root = checkpoint.checkpoint_root(out)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2"]
    assert (checkpoint.find_checkpoint(out, True) / "a.txt").read_text() == "new"
    (root / "latest").write_text("step-9\n")  # a dangling pointer: the newest complete step is used instead
    assert checkpoint.find_checkpoint(out, True).name == "step-2"
    (root / "step-2" / "a.txt").write_text("truncated!")  # its size no longer matches the manifest
    with pytest.raises(FileNotFoundError, match="no complete checkpoint.*step-9, which does not exist.*a.txt has"):
        checkpoint.find_checkpoint(out, True)
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        checkpoint.find_checkpoint(out, str(root / "step-7"))


# ---- checkpoint files are loaded with weights_only=True ----------------------------------------------------
class _RunsCode:
    """Unpickling this calls exec: what a replaced checkpoint file could do under weights_only=False."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _stand_in_pipeline(tmp_path, resume_from, saved: dict):
    """The pipeline as PipelineCheckpointer sees it, its components' state the PPO update's (KL coefficient,
    old-log-prob choice)."""
    cluster = SimpleNamespace(save_checkpoint=lambda path: None, load_checkpoint=lambda path: None)
    kl_ctrl = SimpleNamespace(value=np.float64(0.05))  # the adaptive controller's value is a numpy float
    old_log_probs = OldLogProbs(tiny_config(), rows_are_samples=True)

    def load_components_state(state):
        kl_ctrl.value = state["kl_coef"]
        old_log_probs.load_state_dict(state.get("old_log_probs"))

    return SimpleNamespace(
        config=SimpleNamespace(
            output_dir=str(tmp_path),
            checkpoint_dir=None,
            resume_from_checkpoint=resume_from,
            max_steps=4,
            max_ckpt_to_keep=0,
            fingerprint=lambda: {"seed": 1},
            trained_roles=lambda: [],  # no model directory to compare the saved shapes with
        ),
        trained_clusters=lambda: {"actor_train": cluster},
        memory=SimpleNamespace(use=lambda *names: None),
        data_state=lambda: {"sampler": {"epoch": 1, "cursor": 16}},
        load_data_state=lambda state: saved.update(state),
        components_state=lambda: {"kl_coef": float(kl_ctrl.value), "old_log_probs": old_log_probs.state_dict()},
        load_components_state=load_components_state,
        kl_ctrl=kl_ctrl,
        old_log_probs=old_log_probs,
    )


def test_pipeline_state_round_trips_as_plain_data(tmp_path):
    saved = {}
    set_seed(7)
    np.random.standard_normal()  # numpy now caches a second gaussian: part of its state
    pipeline = _stand_in_pipeline(tmp_path, False, saved)
    pipeline.old_log_probs.measured = 3e-7  # the first step found the rollout log-probs exact
    PipelineCheckpointer(pipeline).save(completed_steps=2)
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    state_file = tmp_path / "checkpoints" / "step-2" / STATE_FILE
    assert torch.serialization.get_unsafe_globals_in_checkpoint(state_file) == []
    set_seed(8)
    resumed = _stand_in_pipeline(tmp_path, True, saved)
    assert PipelineCheckpointer(resumed).resume() == 2
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == expected
    assert saved["sampler"] == {"epoch": 1, "cursor": 16} and resumed.kl_ctrl.value == 0.05
    assert resumed.old_log_probs.measured == 3e-7


def test_rng_state_loads_with_weights_only(tmp_path):
    set_seed(3)
    torch.save(get_rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.random(), torch.rand(1).item())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected


def test_checkpoint_files_that_would_run_code_are_refused(tmp_path):
    marker = tmp_path / "code_ran"
    step = tmp_path / "checkpoints" / "step-2"
    step.mkdir(parents=True)
    torch.save({"completed_steps": _RunsCode(marker)}, step / STATE_FILE)
    checkpoint.write_manifest(step)
    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        PipelineCheckpointer(_stand_in_pipeline(tmp_path, str(step), {})).resume()
    # a trained role's per-worker RNG file
    worker = CheckpointMixin()
    worker.strategy, worker.rank, worker.world_size, worker.worker_name = (
        SimpleNamespace(load_checkpoint=lambda path: None),
        0,
        1,
        "actor_train",
    )
    torch.save(_RunsCode(marker), step / "rng_state_rank0.pt")
    with pytest.raises(pickle.UnpicklingError, match="refused to load"):
        worker.load_checkpoint(str(step))
    assert not marker.exists()


def test_deepspeed_checkpoints_load_weights_only(tmp_path):
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    from roll.strategies.deepspeed_train import load_checkpoints_weights_only

    engine = SimpleNamespace(checkpoint_engine=TorchCheckpointEngine())
    load_checkpoints_weights_only(engine)
    # what ZeRO optimizer-state files hold besides tensors
    state = {
        "zero_stage": ZeroStageEnum.gradients,
        "loss_scaler": LossScaler(1.0),
        "dynamic": DynamicLossScaler(2.0**16, 1000, min_scale=1.0, delayed_shift=2, consecutive_hysteresis=False),
        "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}],
        "state": {"exp_avg": torch.ones(4)},
    }
    engine.checkpoint_engine.save(state, str(tmp_path / "optim_states.pt"))
    loaded = engine.checkpoint_engine.load(str(tmp_path / "optim_states.pt"), map_location="cpu")
    assert loaded["zero_stage"] is ZeroStageEnum.gradients and loaded["loss_scaler"].cur_scale == 1.0
    assert loaded["dynamic"].cur_scale == 2.0**16 and loaded["param_slice_mappings"][0]["w"].numel == 4
    assert torch.equal(loaded["state"]["exp_avg"], torch.ones(4))
    marker = tmp_path / "code_ran"
    torch.save({"optimizer_state_dict": _RunsCode(marker)}, tmp_path / "bad.pt")
    with pytest.raises(pickle.UnpicklingError):
        engine.checkpoint_engine.load(str(tmp_path / "bad.pt"), map_location="cpu")
    assert not marker.exists()
