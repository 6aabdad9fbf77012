"""The thin pipeline every kind builds on: its roles started from the config, the step loop with its progress
line, recovery (max_failures), checkpoints, tracking and the validation schedule.

A kind brings what a step does: `step(step)` (one pipeline step, returning its metrics), `validate(step)`,
`_setup_data()`, `_role_configs()` (the roles to start; default: every configured role) and the components it
composes (`_build_components()`, e.g. the PPO update of roll/pipeline/core/ppo_update.py, whose hooks the loop
calls). RLVR: `roll.pipeline.rlvr`; agentic: `roll.pipeline.agentic`. A kind without generation (no actor_infer,
no weight sync, no KL controller) composes no PPO update.
"""

import time

from transformers import AutoTokenizer

from roll.configs.profiler import role_profile
from roll.distributed.cluster import Cluster, RoleFailure
from roll.distributed.data_proto import DataProto
from roll.distributed.ray_utils import init_ray
from roll.distributed.resource_manager import ResourceManager, check_placements, describe_workers
from roll.pipeline.core import preflight
from roll.pipeline.core.checkpointing import PipelineCheckpointer, check_output_dir, checkpoint_base
from roll.pipeline.core.colocation import PhaseMemory
from roll.pipeline.core.component import PipelineComponent
from roll.pipeline.core.concurrency import ThreadPlan
from roll.pipeline.core.metrics import HEADLINE_METRICS, fmt, progress
from roll.pipeline.core.output_dir import claim_output_dirs
from roll.pipeline.core.profiling import StepProfiler, overhead_and_busy
from roll.pipeline.core.stopping import STOPPER, stop_point
from roll.utils.import_utils import import_class
from roll.utils.logging import get_logger
from roll.utils.progress import ETA, StepTimer, process_age
from roll.utils.seeding import set_seed
from roll.utils.tracking import Tracker

logger = get_logger("roll.pipeline")


class BasePipeline:
    """`Pipeline(config).run()` trains; `close()` (or a `with` block) stops the workers and frees the
    devices, so several pipelines can run one after another in one Ray session. `callbacks` are
    `roll.pipeline.core.callbacks.StepCallback`s called after every step (e.g. `SampleLogger`).

    Every model role of the kind (config.ROLES) is an attribute of the pipeline named after it: its Cluster, or
    None where it is not started (e.g. `self.actor_infer`)."""

    # Independent phases on different workers run at once (roll.pipeline.core.concurrency); False runs them one
    # after another with the same thread settings (the same numbers, bit for bit: the tests compare both).
    overlap_phases = True
    validates_before_training = True  # validation at step 0 on a fresh start (when eval_steps is set)
    timer: StepTimer | None = None  # the current step's (new_timer)
    components: tuple[PipelineComponent, ...] = ()
    headline_metrics = HEADLINE_METRICS  # (label, metric) pairs at the front of the progress line, where present

    def __init__(self, config, callbacks=()):
        self.config = config
        self.callbacks = list(callbacks)
        self.clusters: dict[str, Cluster] = {}
        self.resource_manager = None
        self.recoveries = 0  # automatic recoveries so far (max_failures)
        logger.info("experiment %r: seed %d, output_dir %s", config.exp_name, config.seed, config.output_dir)
        self.placements: list[dict] = []  # every worker's describe_placement(), filled at start-up
        set_seed(config.seed)
        preflight.check_roles(config)  # model directories, worker classes: before anything loads them
        self.output_lock = claim_output_dirs(config)  # writable, not in use, no earlier run's checkpoints
        try:
            self._set_up(config)
        except BaseException:
            self.output_lock.release()
            raise

    def _set_up(self, config) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(
            getattr(config, config.tokenizer_role()).model_args.model_name_or_path
        )
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self._setup_data()
        self.components = tuple(self._build_components())
        self.checkpointer = PipelineCheckpointer(self)
        self.checkpointer.check_resumable()
        self.tracker = Tracker.from_config(config)
        try:
            self._create_clusters()
        except BaseException:
            self.close()  # a half-built pipeline must not keep workers and devices
            raise
        for component in self.components:
            component.attach()

    # ---- hooks of a pipeline kind -------------------------------------------------------------------
    def _setup_data(self) -> None:
        """Load data before any worker starts (bad rows fail fast)."""

    def _build_components(self) -> list[PipelineComponent]:
        """The components the kind composes (called once, after `_setup_data`)."""
        return []

    def _role_configs(self) -> dict:
        """name → WorkerConfig of every role to start: by default every configured role of the config."""
        return self.config.roles()

    def probe_batch(self) -> DataProto:
        """A fixed prompt batch (e.g. the weight-sync check's probe): a kind that generates provides it."""
        raise NotImplementedError(f"{type(self).__name__}.probe_batch")

    def step(self, step: int) -> dict:
        raise NotImplementedError

    def validate(self, step: int) -> dict:
        return {}

    def _background_roles(self) -> set[str]:
        """Roles whose calls run between the pipeline's phases (an async rollout's), so every phase shares the
        cores with them (ThreadPlan). By default all: each role keeps its share of the cores."""
        return set(self.clusters)

    def new_timer(self) -> StepTimer:
        """The step's StepTimer (its concurrent phases show in the progress line)."""
        self.timer = StepTimer()
        return self.timer

    def data_state(self) -> dict:
        """Driver-side data position saved in checkpoints (e.g. the prompt sampler's)."""
        return {}

    def load_data_state(self, state: dict) -> None:
        pass

    # ---- set-up -------------------------------------------------------------------------------
    def _create_clusters(self) -> None:
        config = self.config
        # Attaches to a running cluster (RAY_ADDRESS) or starts a local one (or takes the one the launcher started
        # while it checked the config: `started` is then when that began); a cluster without the devices the
        # config needs fails here, before anything is reserved or started.
        started, ray_up = init_ray(
            num_devices=config.num_devices, env_vars=config.system_envs, num_nodes=config.num_nodes
        )
        self.resource_manager = ResourceManager(
            num_nodes=config.num_nodes, num_gpus_per_node=config.num_gpus_per_node, timeout=config.placement_timeout
        )
        for name, worker_config in self._role_configs().items():
            self.clusters[name] = Cluster(
                name=name,
                worker_cls=import_class(worker_config.worker_cls),
                resource_manager=self.resource_manager,
                worker_config=worker_config,
                seed=config.seed,
                runtime_env=_runtime_env(config, name, worker_config),
            )
        # where every worker landed (node, device); the first call each worker answers: the roles' start_timeout
        start_timeout = max(cluster.start_timeout for cluster in self.clusters.values())
        self.placements = describe_workers(self.clusters, timeout=start_timeout)
        processes_up = time.perf_counter()
        logger.info("%s", check_placements(self.placements, self.resource_manager))
        if self.saves_checkpoints and (config.save_steps or config.resume_from_checkpoint or config.checkpoint_on_stop):
            check_output_dir(checkpoint_base(config), self.clusters)
        for name in config.role_specs():
            setattr(self, name, self.clusters.get(name))
        specs, configured = config.model_role_specs(), config.roles()
        models = {name: cluster for name, cluster in self.clusters.items() if name in specs}
        self.profiler = StepProfiler(config, self.clusters)
        self.threads = ThreadPlan(self.clusters, self.placements, self._background_roles())
        self.memory = PhaseMemory(models, {name: configured[name].device_mapping for name in models})
        steps = config.optimizer_steps()  # per pipeline step, for LR schedules
        pending = [
            cluster.initialize.submit(total_steps=config.max_steps * steps.get(name, 0))
            for name, cluster in self.clusters.items()
        ]
        for call in pending:  # every role loads its model at once; each wait keeps the role's timeout
            call.result()
        now, age = time.perf_counter(), process_age()
        # role start-up (README, docs/profiling.md): from Ray's start to every model loaded; and the whole wait
        # since the process started (imports and config checks included)
        logger.info(
            "started %d roles (%d workers) in %.1f s (Ray up after %.1f s, worker processes up after %.1f s, models "
            "loaded in %.1f s)%s",
            len(self.clusters),
            sum(c.world_size for c in self.clusters.values()),
            now - started,
            ray_up - started,
            processes_up - started,
            now - processes_up,
            "" if age is None else f"; {age:.1f} s since the process started",
        )

    @property
    def saves_checkpoints(self) -> bool:
        """A pipeline that trains a role has state to save (a rollout-only one has none)."""
        return bool(self.trained_clusters())

    def trained_clusters(self) -> dict:
        """name → Cluster of the started roles that train (their engine state is checkpointed), in ROLES order."""
        return {name: self.clusters[name] for name in self.config.trained_roles() if name in self.clusters}

    def components_state(self) -> dict:
        """The components' driver state for pipeline_state.pt."""
        return {key: value for component in self.components for key, value in component.state_dict().items()}

    def load_components_state(self, state: dict) -> None:
        for component in self.components:
            component.load_state_dict(state)

    def close(self) -> None:
        """Stop every role's workers and release the devices; the Ray session stays up."""
        for cluster in self.clusters.values():
            cluster.shutdown()
        self.clusters = {}
        if self.resource_manager is not None:
            self.resource_manager.shutdown()
            self.resource_manager = None
        self.tracker.close()
        self.output_lock.release()

    def __enter__(self) -> "BasePipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> dict:
        """Train from the first step not yet done (0, or the one after a resumed checkpoint) to max_steps.

        With `max_failures` > 0, a worker that dies or a call that times out (RoleFailure) does not end the
        run: the roles are torn down and restarted, the last complete checkpoint is reloaded (or the run starts
        over if none was saved yet) and the steps since are redone, at most max_failures times.

        Returns {"first_step": 0-based first step run, "before": validation metrics before training (only
        on a fresh start), "steps": {0-based step: that step's metrics}, "after": the last validation,
        "recoveries": automatic recoveries}.
        """
        history = {"first_step": None, "before": {}, "steps": {}, "after": None, "recoveries": 0}
        source = None  # the first attempt resumes as configured
        while True:
            try:
                with STOPPER.safe_points():  # SIGTERM / Ctrl-C stop between steps (roll.pipeline.core.stopping)
                    self._run_from(self.checkpointer.resume(source), history)
                break
            except RoleFailure as failure:
                if self.recoveries >= self.config.max_failures:
                    raise
                self.recoveries += 1
                history["recoveries"] = self.recoveries
                logger.warning(
                    "recovery %d of max_failures=%d: %s: restarting every role and resuming from the last complete "
                    "checkpoint",
                    self.recoveries,
                    self.config.max_failures,
                    failure,
                )
                source = self._restart_roles()
        self.tracker.flush()
        return history

    def _run_from(self, first_step: int, history: dict) -> None:
        for component in self.components:
            component.start(first_step)
        if history["first_step"] is None:
            history["first_step"] = first_step
            if self.validates_before_training:
                history["before"] = self._validate_before(first_step)
        eta = ETA(first_step, self.config.max_steps - 1)
        stop_point(self, first_step)  # a signal before the first step: stop, nothing new to save
        for step in range(first_step, self.config.max_steps):
            metrics = self._run_step(step, eta)
            history["steps"][step] = metrics
            history["after"] = {k: v for k, v in metrics.items() if k.startswith("val/")} or history["after"]
            stop_point(self, step + 1)  # a signal during the step: checkpoint, then StopRequested

    def _restart_roles(self):
        """Tear every role down and start it again; returns what to resume from: "latest" (the newest complete
        checkpoint under output_dir, else the configured resume_from_checkpoint) or False (start over, with
        the driver's seed, data order and the components' state reset)."""
        started = time.perf_counter()
        for cluster in self.clusters.values():
            cluster.shutdown()
        self.clusters = {}
        if self.resource_manager is not None:
            self.resource_manager.shutdown()
            self.resource_manager = None
        self._create_clusters()
        for component in self.components:
            component.attach()
        logger.info("recovery: roles restarted in %.1f s", time.perf_counter() - started)
        if self.checkpointer.latest() is not None:
            return "latest"
        if self.config.resume_from_checkpoint:
            return None  # nothing saved since: resume from the configured checkpoint again
        logger.warning("recovery: no checkpoint saved yet: starting over from step 1")
        set_seed(self.config.seed)
        self._setup_data()
        for component in self.components:
            component.reset()
        return False

    def _validate_before(self, first_step: int) -> dict:
        if first_step != 0 or not self.config.eval_steps:
            return {}
        metrics = self.validate(0)
        if metrics:
            logger.info("validation before training: %s", fmt(metrics))
            self.tracker.log(metrics, 0)
        return metrics

    def _run_step(self, step: int, eta: ETA) -> dict:
        """One step plus its bookkeeping: validation, tracking, the progress line, checkpointing."""
        config = self.config
        self.profiler.start(step)
        busy = {name: cluster.busy_seconds for name, cluster in self.clusters.items()}
        sent = {name: cluster.sent_bytes for name, cluster in self.clusters.items()}
        offload_seconds = self.memory.seconds
        started = time.perf_counter()
        metrics = self.step(step)
        last = step == config.max_steps - 1
        if config.eval_steps and ((step + 1) % config.eval_steps == 0 or last):
            validation_started = time.perf_counter()
            metrics.update(self.validate(step + 1))
            metrics["timing/validation"] = time.perf_counter() - validation_started
        metrics["timing/step"] = time.perf_counter() - started
        # colocated roles' offload/reload calls (roll.pipeline.core.colocation), inside the phases' times
        metrics["timing/offload_reload"] = self.memory.seconds - offload_seconds
        busy = {name: cluster.busy_seconds - busy[name] for name, cluster in self.clusters.items()}
        metrics.update(overhead_and_busy(metrics, busy))
        # batch bytes the driver sent each role (data-parallel shards: Cluster.sent_bytes)
        for name, cluster in self.clusters.items():
            if cluster.sent_bytes > sent.get(name, 0):
                metrics[f"system/sent_bytes/{name}"] = cluster.sent_bytes - sent.get(name, 0)
        self.profiler.stop()  # writing the traces is not part of the step's time
        metrics["system/recoveries"] = self.recoveries
        # steps as a person reads them, 1-based (the progress line's [N/max], checkpoint step-N, samples step-N,
        # learning_curves.png); validation before training is step 0 (docs/quickstart.md)
        self.tracker.log(metrics, step + 1)
        if step % config.logging_steps == 0 or last:
            concurrent = self.timer.concurrent if self.timer else ()
            logger.info("%s %s", eta.line(step), progress(metrics, concurrent, self.headline_metrics))
        if self.saves_checkpoints and config.save_steps and ((step + 1) % config.save_steps == 0 or last):
            self.checkpointer.save(completed_steps=step + 1)
        return metrics


def _runtime_env(config, name: str, worker_config) -> dict | None:
    """Ray's runtime_env of a role's workers: its own system_envs over the pipeline's, and Nsight when profiled."""
    env = _nsight_env(config, name, worker_config)
    if worker_config.system_envs:
        env = env or {}
        env["env_vars"] = {**config.system_envs, **worker_config.system_envs}
    return env


def _nsight_env(config, name: str, worker_config) -> dict | None:
    """Ray's runtime_env running a role under Nsight Systems when its profiler tool is nsys: one capture per
    profiled step, opened and closed by the worker (torch.cuda.profiler.start/stop). Not verified here: the
    CPU test machine has neither nsys nor a GPU, and the config check refuses nsys where nsys is missing."""
    settings = role_profile(config.profiler, worker_config.profiler, config.output_dir)
    if settings is None or settings["tool"] != "nsys":
        return None
    return {
        "env_vars": dict(config.system_envs),
        "nsight": {
            "t": "cuda,cudnn,cublas,nvtx",
            "capture-range": "cudaProfilerApi",
            "capture-range-end": "repeat",
            "o": f"{settings['save_path']}/{name}/nsys/worker_%p",
        },
    }
