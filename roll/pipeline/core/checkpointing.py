"""Pipeline checkpoints: trainer state from the workers plus the driver's step, data position and RNG.

`<output_dir>/checkpoints/step-<N>/` holds the state after N completed steps (N as in the progress
line "[N/max_steps]"); a resumed run continues with step N+1 (0-based index N):
    <role>/                 each trained role's engine state (weights, optimizer, LR schedule) + hf/ (loadable
                            copy): actor_train, and critic (GAE only), for the policy-optimisation kinds
    pipeline_state.pt       completed steps, the data position (e.g. the prompt sampler's), driver RNG, the
                            components' state (the PPO update's KL coefficient and old-log-prob choice), and
                            the config's fingerprint
    MANIFEST.json           written last: every file's size and sha256 (roll.utils.checkpoint)

The driver and the trained roles' workers write into the same step directory, so on a cluster
output_dir must be one directory every node sees (a shared filesystem): `check_output_dir` verifies that
before training starts.
"""

import os
import shutil
import traceback
import uuid
from pathlib import Path

import torch

from roll.pipeline.core.model_files import check_resumed_shapes
from roll.utils import checkpoint
from roll.utils.errors import InputError, MissingInput, SaveFailed
from roll.utils.logging import get_logger
from roll.utils.seeding import get_rng_state, set_rng_state

logger = get_logger("roll.checkpoint")
STATE_FILE = "pipeline_state.pt"


class PipelineCheckpointer:
    """`pipeline`: its config (output_dir, checkpoint_dir, resume_from_checkpoint, max_steps, max_ckpt_to_keep,
    fingerprint(), trained_roles()), `trained_clusters()`, `memory.use(role)`, `data_state()` /
    `load_data_state(state)` and `components_state()` / `load_components_state(state)`."""

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self._checked = None  # the checkpoint check_resumable found and verified in full

    def save(self, completed_steps: int) -> None:
        output_dir = checkpoint_base(self.pipeline.config)
        staged = checkpoint.staging_dir(output_dir, completed_steps)
        try:
            self._save_into(staged, output_dir, completed_steps)
        except Exception as error:
            if not checkpoint.out_of_space(error, staged):
                raise
            # the partial save would go on filling the disk and block the next try: remove it now, and drop the
            # failed writers' frames so their open files (deleted, still holding space) are closed
            seen = error
            while seen is not None:
                traceback.clear_frames(seen.__traceback__)
                seen = seen.__cause__ or seen.__context__
            shutil.rmtree(staged, ignore_errors=True)
            previous = checkpoint.find_checkpoint(output_dir, True)
            raise SaveFailed(
                f"saving checkpoint step-{completed_steps} failed: no space left on device under {staged.parent} "
                f"({type(error).__name__}: {str(error)[:300]}). The partial {staged.name} was removed; the newest "
                f"complete checkpoint is {previous or 'none (nothing saved yet)'}. Free space (or set "
                f"checkpoint_dir / max_ckpt_to_keep), then rerun with resume_from_checkpoint: true"
            ) from error

    def _save_into(self, staged, output_dir: str, completed_steps: int) -> None:
        for name, cluster in self.pipeline.trained_clusters().items():
            self.pipeline.memory.use(name)  # an offloaded engine's state is not where save expects it
            cluster.save_checkpoint(str(staged / name))
        # plain data only: resume loads it with weights_only=True
        state = {
            "completed_steps": int(completed_steps),
            **self.pipeline.data_state(),
            "rng": get_rng_state(),
            **self.pipeline.components_state(),
            "config": self.pipeline.config.fingerprint(),
        }
        torch.save(state, staged / STATE_FILE)
        final = checkpoint.commit(output_dir, completed_steps, max_to_keep=self.pipeline.config.max_ckpt_to_keep)
        logger.info("saved checkpoint %s", final)

    def check_resumable(self) -> None:
        """Start-up check, before any worker starts: the checkpoint a resume would load is complete and was
        saved by a compatible configuration (the config's `fingerprint()`: what a resumed run must share)."""
        config = self.pipeline.config
        path = checkpoint.find_checkpoint(checkpoint_base(config), config.resume_from_checkpoint, checksums=True)
        self._checked = path  # verified in full: resume loads it without hashing it again
        if path is None:
            return
        if not (path / STATE_FILE).is_file():
            raise MissingInput(
                f"resume_from_checkpoint: {path} has no {STATE_FILE}; it is not a complete "
                f"pipeline checkpoint (expected <output_dir>/checkpoints/step-N)"
            )
        trained = {role: getattr(config, role) for role in config.trained_roles()}  # the kind's RoleSpecs
        check_resumed_shapes(path, {r: w.model_args.model_name_or_path for r, w in trained.items()})
        saved = checkpoint.load_state(path / STATE_FILE).get("config")
        if saved is None:  # written before fingerprints existed
            return
        current = config.fingerprint()
        differ = [
            f"{key} = {saved[key]!r} there, {current[key]!r} here"
            for key in current
            if saved.get(key, current[key]) != current[key]
        ]
        if differ:
            raise InputError(
                f"resume_from_checkpoint: {path} was saved by a different configuration: {'; '.join(differ)}. "
                f"Resume with the same values, or start a new run (resume_from_checkpoint: false or another output_dir)"
            )

    def latest(self):
        """The newest complete checkpoint under output_dir, or None."""
        return checkpoint.find_checkpoint(checkpoint_base(self.pipeline.config), True)

    def resume(self, source=None) -> int:
        """Restores the newest (or the named) checkpoint if asked; returns the 0-based first step to run.
        `source`: None = as configured (resume_from_checkpoint); "latest" = the newest complete checkpoint
        under output_dir (automatic recovery); False = none (start over)."""
        config = self.pipeline.config
        wanted = config.resume_from_checkpoint if source is None else (source == "latest")
        if source is None and self._checked is not None:
            path, self._checked = self._checked, None  # found and verified by check_resumable at start-up
        else:  # the newest checkpoint whose files all match their sha256 (a corrupted one is skipped, logged)
            path = checkpoint.find_checkpoint(checkpoint_base(config), wanted, checksums=True)
        if path is None:
            if wanted:
                logger.info(
                    "resume_from_checkpoint is set but %s has no checkpoint yet: starting at step 1",
                    checkpoint_base(config),
                )
            return 0
        if not (path / STATE_FILE).is_file():
            raise MissingInput(
                f"resume_from_checkpoint: {path} has no {STATE_FILE}; it is not a complete "
                f"pipeline checkpoint (expected <output_dir>/checkpoints/step-N)"
            )
        state = checkpoint.load_state(path / STATE_FILE)
        completed = state["completed_steps"]
        if completed >= config.max_steps:
            logger.warning(
                "checkpoint %s already has %d completed steps, max_steps is %d: nothing to train",
                path,
                completed,
                config.max_steps,
            )
        for name, cluster in self.pipeline.trained_clusters().items():
            self.pipeline.memory.use(name)
            cluster.load_checkpoint(str(path / name))
        self.pipeline.load_data_state(state)
        set_rng_state(state["rng"])
        self.pipeline.load_components_state(state)
        logger.info("resumed from %s: continuing at step %d", path, completed + 1)
        return completed


def checkpoint_base(config) -> str:
    """The directory whose checkpoints/ folder holds the run's checkpoints."""
    return config.checkpoint_dir or config.output_dir


def final_model_dir(config, role: str) -> Path:
    """The loadable HF copy (weights + tokenizer) of `role` after the run's last step: its checkpoint's hf/."""
    path = Path(checkpoint_base(config)) / "checkpoints" / f"step-{config.max_steps}" / role / "hf"
    if not (path / "config.json").is_file():
        raise InputError(f"{path}: no model there (the run saves its last step only with save_steps > 0)")
    return path


def check_output_dir(output_dir: str, clusters: dict, timeout: float = 120.0) -> None:
    """Every worker that writes checkpoints (a role with save_checkpoint) must see the directory the driver
    writes to and be able to write into it; raises naming each rank that cannot, and its node."""
    import ray

    try:
        os.makedirs(output_dir, exist_ok=True)
        marker = os.path.join(output_dir, f".roll-shared-{uuid.uuid4().hex}")
        with open(marker, "w") as file:
            file.write(marker)
    except OSError as error:
        raise RuntimeError(f"output_dir {output_dir!r}: the driver cannot write it ({error})") from None
    try:
        pending = [
            (name, rank, worker.__ray_call__.remote(probe_output_dir, output_dir, os.path.basename(marker)))
            for name, cluster in clusters.items()
            if callable(getattr(cluster, "save_checkpoint", None))
            for rank, worker in enumerate(cluster.workers)
        ]
        problems = [
            f"{name} rank {rank} {problem}" for name, rank, ref in pending if (problem := ray.get(ref, timeout=timeout))
        ]
    finally:
        os.unlink(marker)
    if problems:
        raise RuntimeError(
            f"output_dir {output_dir!r} must be one directory that every node sees and can write (on a cluster: "
            f"a shared filesystem, docs/cluster.md), but:\n  " + "\n  ".join(problems)
        )


def probe_output_dir(worker, output_dir: str, marker: str) -> str | None:
    """In a worker (via __ray_call__): None when `output_dir` is the driver's directory (the driver's
    `marker` file is there) and writable here, else what is wrong, with this node's address."""
    from roll.distributed.ray_utils import node_ip

    where = f"on node {node_ip()} (cwd {os.getcwd()})"
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, f".roll-write-{os.getpid()}-{uuid.uuid4().hex}")
        with open(probe, "w") as file:
            file.write("ok")
        os.unlink(probe)
    except OSError as error:
        return f"{where} cannot write it: {error}"
    if not os.path.isfile(os.path.join(output_dir, marker)):
        return (
            f"{where} does not see the file the driver just wrote there ({marker}): it is a different "
            f"directory on this node"
        )
    return None
