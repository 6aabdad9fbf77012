"""Starting Ray for a pipeline: virtual devices on CPU-only machines, quiet and bounded."""

import os

# Actors inherit these: 2-core machines slow down 10-40x when every process spawns its own threads.
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_AUTH_MODE": "disabled",
    "PYTHONUNBUFFERED": "1",
    "RAY_DEDUP_LOGS": "0",
    # progress bars of every weight load and data read would drown the per-step lines
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}
VIRTUAL_DEVICE = "roll_device"


def has_gpus() -> bool:
    import torch

    return torch.cuda.is_available()


def init_ray(num_devices: int, env_vars: dict | None = None) -> None:
    """`env_vars` (the config's system_envs) override the defaults below in every worker."""
    import ray

    if ray.is_initialized():  # e.g. several pipelines in one process: the session's devices must suffice
        _check_session_devices(num_devices)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    gpus = has_gpus()
    resources = {} if gpus else {VIRTUAL_DEVICE: num_devices}
    env_vars = {**{k: os.environ.get(k, v) for k, v in WORKER_ENV.items()}, **(env_vars or {})}
    if not gpus:
        env_vars.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed otherwise warns that it found no GPU
    os.environ.setdefault("RAY_DEDUP_LOGS", env_vars["RAY_DEDUP_LOGS"])  # read by the driver's log monitor
    # Workers import user modules named by dotted path (custom reward workers) the way the driver does.
    paths = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env_vars["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    ray.init(
        resources=resources,
        include_dashboard=False,
        object_store_memory=1 << 30,
        runtime_env={"env_vars": env_vars},
        log_to_driver=True,
        configure_logging=False,
    )


def _check_session_devices(num_devices: int) -> None:
    import ray

    if has_gpus():
        return
    have = ray.cluster_resources().get(VIRTUAL_DEVICE, 0)
    if have < num_devices:
        raise RuntimeError(
            f"this process's Ray session was started with {have:g} virtual devices but the pipeline "
            f"needs num_nodes × num_gpus_per_node = {num_devices}; call ray.shutdown() first"
        )
