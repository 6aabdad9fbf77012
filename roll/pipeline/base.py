"""What every policy-optimisation pipeline does around its rollout: roles, forward passes, the PPO
update, weight sync, checkpoints and the step loop.

A subclass brings the rollout: `step(step)` (one pipeline step, returning its metrics), `validate(step)`,
`_role_configs()` (the roles to start besides the model roles' defaults) and `_probe_batch()` (the fixed
prompt of the weight-sync check). RLVR: `roll.pipeline.rlvr`; agentic: `roll.pipeline.agentic`.
"""

import time

from transformers import AutoTokenizer

from roll.algorithms import get_adv_estimator_spec, get_kl_controller
from roll.configs import describe_reference, optimizer_steps, reference_source
from roll.configs.checks import tokenizer_role
from roll.configs.policy_loss import loss_settings
from roll.configs.profiler import role_profile
from roll.distributed.cluster import Cluster, RoleFailure
from roll.distributed.data_proto import DataProto
from roll.distributed.ray_utils import init_ray
from roll.distributed.resource_manager import ResourceManager, check_placements, describe_workers
from roll.pipeline.core import preflight, step_maths
from roll.pipeline.core.checkpointing import PipelineCheckpointer, check_output_dir, checkpoint_base
from roll.pipeline.core.colocation import PhaseMemory
from roll.pipeline.core.concurrency import ThreadPlan, lane_roles, lanes_by_devices, run_lanes
from roll.pipeline.core.metrics import fmt, mean_of_ranks, progress
from roll.pipeline.core.old_log_probs import OldLogProbs
from roll.pipeline.core.output_dir import claim_output_dirs
from roll.pipeline.core.profiling import StepProfiler, overhead_and_busy
from roll.pipeline.core.rollout_dump import RolloutDumpLogger, RolloutStore
from roll.pipeline.core.score_watch import ConstantScoreWarning
from roll.pipeline.core.stopping import STOPPER, stop_point
from roll.pipeline.core.weight_sync import WeightSync
from roll.utils.import_utils import import_class
from roll.utils.logging import get_logger
from roll.utils.progress import ETA, StepTimer, process_age
from roll.utils.seeding import set_seed
from roll.utils.tracking import Tracker

logger = get_logger("roll.pipeline")
MODEL_ROLES = ("actor_train", "actor_infer", "reference", "critic")  # the roles that hold devices
# The worker method behind each extra forward pass an estimator can declare (roll.algorithms.FORWARD_PASSES).
FORWARD_PASS_METHODS = {"sum_pi_squared": "compute_sum_pi_squared"}


class BasePipeline:
    """`Pipeline(config).run()` trains; `close()` (or a `with` block) stops the workers and frees the
    devices, so several pipelines can run one after another in one Ray session. `callbacks` are
    `roll.pipeline.core.callbacks.StepCallback`s called after every step (e.g. `SampleLogger`)."""

    saves_checkpoints = True  # a pipeline that trains nothing (agentic rollout-only) has no state to save
    # the training rows are the engine's prompts and samples token for token (roll.pipeline.core.old_log_probs)
    rows_are_samples = False
    # Independent phases on different workers run at once (roll.pipeline.core.concurrency); False runs them one
    # after another with the same thread settings (the same numbers, bit for bit: the tests compare both).
    overlap_phases = True
    timer: StepTimer | None = None  # the current step's (new_timer)

    def __init__(self, config, callbacks=()):
        self.config = config
        self.callbacks = [*callbacks, ConstantScoreWarning()]  # a domain whose scores are all the same for N steps
        if config.rollout_dump_dir:
            self.callbacks.append(RolloutDumpLogger(config.rollout_dump_dir))
        self.rollout_store = RolloutStore(config.rollout_mock)  # ROLL's rollout dump / replay
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
            getattr(config, tokenizer_role(config)).model_args.model_name_or_path
        )
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self._setup_data()
        self.kl_ctrl = get_kl_controller(_kl_ctrl_settings(config))
        self.old_log_probs = OldLogProbs(config, self.rows_are_samples)
        self.checkpointer = PipelineCheckpointer(self)
        self.checkpointer.check_resumable()
        self.tracker = Tracker.from_config(config)
        try:
            self._create_clusters()
        except BaseException:
            self.close()  # a half-built pipeline must not keep workers and devices
            raise
        self._create_weight_sync()

    def _create_weight_sync(self) -> None:
        self.weight_sync = WeightSync(
            self.actor_train,
            self.actor_infer,
            self._probe_batch(),
            buffer_size_mb=self.config.model_update_buffer_size_mb,
            method=self.config.weight_sync_method,
            adapter_only=self.config.lora_weight_sync == "adapter",
            check=self.config.weight_sync_check,
            full_check_steps=self.config.weight_sync_full_check_steps,
        )

    # ---- hooks of a pipeline kind -------------------------------------------------------------------
    def _setup_data(self) -> None:
        """Load data before any worker starts (bad rows fail fast)."""

    def _role_configs(self) -> dict:
        """name → WorkerConfig of every role to start."""
        config = self.config
        roles = {"actor_train": config.actor_train, "actor_infer": config.actor_infer, "critic": config.critic}
        source = reference_source(config)
        if source == "reference":
            roles["reference"] = config.reference
        elif config.reference is not None and source == "actor_train":
            logger.info("reference role not started: %s", describe_reference(config))
        elif config.reference is not None:
            logger.info(
                "reference role not started: use_kl_loss and add_token_level_kl are both off, so "
                "nothing reads reference log-probs"
            )
        return {name: worker_config for name, worker_config in roles.items() if worker_config is not None}

    def _probe_batch(self) -> DataProto:
        raise NotImplementedError

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
        self.actor_train, self.actor_infer = self.clusters.get("actor_train"), self.clusters["actor_infer"]
        self.reference, self.critic = self.clusters.get("reference"), self.clusters.get("critic")
        models = {name: cluster for name, cluster in self.clusters.items() if name in MODEL_ROLES}
        self.profiler = StepProfiler(config, self.clusters)
        self.threads = ThreadPlan(self.clusters, self.placements, self._background_roles())
        self.memory = PhaseMemory(models, {name: getattr(config, name).device_mapping for name in models})
        steps = optimizer_steps(config)  # per pipeline step, for LR schedules
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

    # ---- phases shared by every pipeline kind ------------------------------------------------------
    def forward_log_probs(
        self, cluster: Cluster, batch: DataProto, key: str, method: str = "compute_log_probs"
    ) -> None:
        """`key` ← a per-token forward quantity of the responses: log-probs (by the worker's `method`, e.g.
        compute_reference_log_probs of a LoRA actor), or for a key of FORWARD_PASS_METHODS (e.g.
        "sum_pi_squared") that quantity."""
        view = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        view.meta_info["temperature"] = self.config.actor_infer.generating_args.temperature
        view, _ = view.pad_to_multiple(cluster.world_size)
        self.memory.use(cluster.name)
        self.threads.enter({cluster.name})
        if key in FORWARD_PASS_METHODS:
            values = getattr(cluster, FORWARD_PASS_METHODS[key])(view).batch[key]
        else:
            values = getattr(cluster, method)(view).batch["log_probs"]
        batch.batch[key] = values[: len(batch)]

    def compute_values(self, batch: DataProto) -> None:
        view = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        view, _ = view.pad_to_multiple(self.critic.world_size)
        self.memory.use("critic")
        self.threads.enter({"critic"})
        batch.batch["values"] = self.critic.compute_values(view).batch["values"][: len(batch)]

    def train(self, batch: DataProto, step: int) -> dict:
        loss_settings(self.config, step).attach(batch)
        metrics = {}
        if self.critic is not None:
            self.memory.use("critic")
            self.threads.enter({"critic"})
            metrics.update(mean_of_ranks(self.critic.train_step(batch)))
        self.memory.use("actor_train")
        self.threads.enter({"actor_train"})
        metrics.update(mean_of_ranks(self.actor_train.train_step(batch)))
        return metrics

    def update(self, batch: DataProto, step: int, timer: StepTimer, alongside: tuple = ()) -> dict:
        """Everything after the rewards: old/ref log-probs (and values), advantages, the PPO update and the
        weight sync; returns their metrics. `alongside`: more phases (name, roles, call) that need only the
        generated batch, run with the forward passes (e.g. RLVR's reward scoring)."""
        config, metrics = self.config, {}
        self._forward_passes(batch, timer, alongside)
        with timer.phase("advantages"):
            metrics.update(step_maths.apply_rollout_is(batch, config))  # on the generated tokens, before masks
            metrics.update(self.old_log_probs.settle(batch))  # the rollout log-probs where they are the old ones
            metrics.update(step_maths.apply_reward_shaping(batch, config))
            metrics.update(step_maths.apply_reward_kl(batch, config, self.kl_ctrl))
            step_maths.compute_advantages(batch, config)
            metrics.update(step_maths.apply_train_infer_correction(batch, config))  # after, as ROLL's pipelines
        with timer.phase("train"):
            metrics.update(self.train(batch, step))
        self._before_weight_sync(timer)
        with timer.phase("weight_sync"):
            self.memory.use("actor_train", "actor_infer")
            self.threads.enter({"actor_train"}, {"actor_infer"})
            metrics.update(self.weight_sync.sync_and_verify(step))
        self._after_weight_sync()
        return metrics

    def _before_weight_sync(self, timer: StepTimer) -> None:
        """Hook: the last moment the engine serves the weights it has (async rollout waits here for its turns)."""

    def _after_weight_sync(self) -> None:
        """Hook: the engine now serves the weights of the step just trained (async rollout's policy version)."""

    def _forward_passes(self, batch: DataProto, timer: StepTimer, alongside: tuple = ()) -> None:
        """old log-probs (actor_train), reference log-probs and critic values of the generated samples, and the
        `alongside` phases: at once where their roles share no device (roll.pipeline.core.concurrency)."""
        train = self.actor_train
        phases = []
        if self.old_log_probs.needs_pass(batch):  # skipped where the rollout log-probs are the old ones
            phases.append(
                ("old_log_probs", "actor_train", lambda: self.forward_log_probs(train, batch, "old_log_probs"))
            )
        for key in get_adv_estimator_spec(self.config.adv_estimator).forward_passes:  # e.g. Σπ²
            phases.append((key, "actor_train", lambda key=key: self.forward_log_probs(train, batch, key)))
        if self.reference is not None:
            ref = self.reference
            phases.append(("ref_log_probs", "reference", lambda: self.forward_log_probs(ref, batch, "ref_log_probs")))
        elif reference_source(self.config) == "actor_train":  # LoRA: the base model = adapters disabled
            method = "compute_reference_log_probs"
            call = lambda: self.forward_log_probs(train, batch, "ref_log_probs", method=method)  # noqa: E731
            phases.append(("ref_log_probs", "actor_train", call))
        if self.critic is not None:
            phases.append(("values", "critic", lambda: self.compute_values(batch)))
        lanes = lanes_by_devices([*phases, *alongside], self.memory.devices)
        with self.threads.together(lane_roles(lanes)):  # the same threads whether or not the lanes overlap
            run_lanes(lanes, timer, parallel=self.overlap_phases)

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
        self.memory.use("actor_train", "actor_infer")
        self.threads.enter({"actor_train"}, {"actor_infer"})
        self.weight_sync.sync_and_verify(first_step - 1, initial=True)  # the engine starts from the trainer's weights
        if history["first_step"] is None:
            history["first_step"] = first_step
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
        the driver's seed, data order and KL controller reset)."""
        started = time.perf_counter()
        for cluster in self.clusters.values():
            cluster.shutdown()
        self.clusters = {}
        if self.resource_manager is not None:
            self.resource_manager.shutdown()
            self.resource_manager = None
        self._create_clusters()
        self._create_weight_sync()
        logger.info("recovery: roles restarted in %.1f s", time.perf_counter() - started)
        if self.checkpointer.latest() is not None:
            return "latest"
        if self.config.resume_from_checkpoint:
            return None  # nothing saved since: resume from the configured checkpoint again
        logger.warning("recovery: no checkpoint saved yet: starting over from step 1")
        set_seed(self.config.seed)
        self._setup_data()
        self.kl_ctrl = get_kl_controller(_kl_ctrl_settings(self.config))
        self.old_log_probs.reset()
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
            logger.info("%s %s", eta.line(step), progress(metrics, self.timer.concurrent if self.timer else ()))
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


def _kl_ctrl_settings(config) -> dict:
    kind = "fixed" if config.target_kl is None else "adaptive"
    return {
        "type": kind,
        "kl_coef": config.init_kl_coef,
        "horizon": config.kl_horizon,
        "target_kl": config.target_kl if config.target_kl is not None else 0.0,
    }
