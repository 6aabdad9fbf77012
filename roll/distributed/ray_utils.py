"""Starting Ray for a pipeline, or attaching to a running Ray cluster; which nodes hold the devices.

`init_ray` attaches when a cluster is given — `RAY_ADDRESS`, or the cluster a `ray start --head` on this
machine recorded (what a plain `ray.init()` finds) — and starts a local one only otherwise. Attached, it
passes only what a job may set (its runtime env), never start-only options, and checks that the cluster
has the devices the config needs before anything is reserved or started (docs/cluster.md).

A device is a GPU, or on CPU-only machines one unit of the custom Ray resource `roll_device` (a virtual
device). Device id `d` is device `d % num_gpus_per_node` of node `d // num_gpus_per_node`; the nodes are
numbered by `device_nodes`: the driver's node first (when it has devices), then by IP address.
"""

import contextlib
import ipaddress
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from roll.distributed.attach import AUTH_MODE_ENV, ClusterAttachError, check_cluster_address, local_ray_hint
from roll.utils.logging import get_logger

logger = get_logger("roll.ray")

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
# The driver's working directory: every worker changes into it (roll.distributed.worker), so relative
# paths in a config (model, data, output_dir) mean the same on every node of a shared-filesystem cluster.
DRIVER_CWD_ENV = "ROLL_DRIVER_CWD"
NODE_ID_LABEL = "ray.io/node-id"  # a label Ray gives every node; placement groups select nodes by it


class ClusterDevicesError(RuntimeError):
    """The Ray cluster lacks the devices a config needs (raised before any worker starts)."""


def has_gpus() -> bool:
    import torch

    return torch.cuda.is_available()


def node_ip() -> str:
    """This process's node address as Ray knows it (the one other nodes reach it at); outside Ray, the
    host name's address. `socket.gethostbyname(hostname)` alone is often 127.0.0.1 (/etc/hosts)."""
    import ray

    if ray.is_initialized():
        return ray.util.get_node_ip_address()
    return socket.gethostbyname(socket.gethostname())


def enter_driver_cwd(logger=None) -> None:
    """In a worker: change into the driver's working directory, so relative paths in the config (model,
    data, output_dir) resolve as they do for the driver. A worker started by `ray start` otherwise runs in
    the directory `ray start` ran in. Where that directory does not exist (a node without the shared
    filesystem) the worker stays where it is and says so."""
    directory = os.environ.get(DRIVER_CWD_ENV)
    if not directory or directory == os.getcwd():
        return
    if os.path.isdir(directory):
        os.chdir(directory)
    elif logger is not None:
        logger.warning(
            "the driver's working directory %s does not exist on node %s: relative paths in the config "
            "will not resolve here; clusters need the project on a filesystem every node mounts at the same "
            "path (docs/cluster.md)",
            directory,
            node_ip(),
        )


def existing_cluster_address() -> str | None:
    """The cluster to attach to: `RAY_ADDRESS`, else the address a `ray start --head` (or
    ray.cluster_utils.Cluster) on this machine recorded, as a plain `ray.init()` would find it. Not
    `ray.init("auto")`'s fallback of attaching to any Ray process found on the machine: on a shared
    machine that is someone else's private session. None (start a local Ray): neither, or `RAY_ADDRESS=local`."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address == "local":  # Ray's own word for "start a new local instance" (ray.init reads it too)
        return None
    if address:
        return address
    try:  # where `ray start` records it: <Ray's temp dir, RAY_TMPDIR-aware>/ray_current_cluster
        from ray._common.utils import get_ray_address_file

        path = get_ray_address_file(None)
    except ImportError:  # a Ray that moved the private helper: its documented default location
        path = os.path.join(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", "ray_current_cluster")
    if os.path.isfile(path):
        with open(path) as file:
            return file.read().strip() or None
    return None


# The local Ray the launcher started while the config was being checked (start_local_ray_early), until a
# pipeline's init_ray takes it: {"key": its arguments, "began"/"up": time.perf_counter() then}.
_early: dict | None = None


def _early_key(num_devices: int, env_vars: dict | None, num_nodes: int) -> tuple:
    return num_devices, tuple(sorted((env_vars or {}).items())), num_nodes


def start_local_ray_early(num_devices: int, env_vars: dict | None = None, num_nodes: int = 1) -> bool:
    """Start now the local Ray that `init_ray` would start for these arguments, so that its ~3.5 s (GCS, raylet
    and agents, mostly waiting on their own processes) overlap the launcher's config checks (~4 s of imports on
    one core). The next `init_ray` takes it when its arguments are the same and starts again otherwise; a run
    that ends before any pipeline took it calls `stop_early_ray`. Returns whether it started one: not where a
    cluster is given to attach to (attaching is quick) or Ray runs in this process already."""
    global _early
    import ray

    if ray.is_initialized() or existing_cluster_address() is not None:
        return False
    began = time.perf_counter()
    _start_local(num_devices, _worker_env(env_vars))
    _early = {"key": _early_key(num_devices, env_vars, num_nodes), "began": began, "up": time.perf_counter()}
    return True


def stop_early_ray() -> None:
    """Shut down the early-started Ray if no pipeline took it (the config was refused, or the run stopped
    before starting its roles); otherwise nothing."""
    global _early
    if _early is None:
        return
    _early = None
    import ray

    ray.shutdown()


def init_ray(num_devices: int, env_vars: dict | None = None, num_nodes: int = 1) -> tuple[float, float]:
    """Attach to the given Ray cluster or start a local one (see the module docstring). `env_vars` (the
    config's system_envs) override the defaults below in every worker. `num_devices` devices on
    `num_nodes` nodes (num_devices / num_nodes each) must exist, or ClusterDevicesError says what is missing.
    Returns the time.perf_counter() at which Ray began starting and at which it was up: earlier than this call
    where the launcher started it early for the same arguments (start_local_ray_early)."""
    global _early
    import ray

    if num_nodes < 1 or num_devices % num_nodes:
        raise ValueError(f"init_ray: {num_devices} devices cannot be split evenly over {num_nodes} nodes")
    per_node = num_devices // num_nodes
    began, up, (early, _early) = time.perf_counter(), None, (_early, None)
    if early is not None and (early["key"] != _early_key(num_devices, env_vars, num_nodes) or not ray.is_initialized()):
        ray.shutdown()  # started for other arguments than the checked config's: start again
    elif early is not None:
        began, up = early["began"], early["up"]
    if ray.is_initialized():  # e.g. several pipelines in one process: the session's devices must suffice
        try:
            device_nodes(num_nodes, per_node)
        except ClusterDevicesError as error:
            if early is not None:  # the local Ray the launcher started for this config: no other session to end
                raise
            raise ClusterDevicesError(
                f"{error}\nThis process is already connected to Ray; if it started a local session with too few "
                f"devices, call ray.shutdown() first"
            ) from None
        return began, up or time.perf_counter()
    env_vars = _worker_env(env_vars)
    address = existing_cluster_address()
    if address is None:
        _start_local(num_devices, env_vars)
        return began, time.perf_counter()
    from_env = bool(os.environ.get("RAY_ADDRESS", "").strip())
    check_cluster_address(address, from_env)  # fails within ~20 s naming the cause; ray.init would retry ~10 min
    try:  # attached: a job may only bring its runtime env; resources and memory are the cluster's
        with keeping_sigterm_handler():
            ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=True, configure_logging=False)
    except ConnectionError as error:
        raise ClusterAttachError(
            f"could not attach to the Ray cluster at {address!r}: {error}. Check that it is up (`ray status` on "
            f"its head node) and that {AUTH_MODE_ENV} matches the cluster's (docs/cluster.md), "
            f"{local_ray_hint(from_env)}"
        ) from error
    try:
        nodes = device_nodes(num_nodes, per_node)
    except ClusterDevicesError:
        ray.shutdown()  # detach: the cluster stays up, this process holds nothing on it
        raise
    logger.info("attached to the Ray cluster at %s; devices on %s", address, ", ".join(map(str, nodes)))
    return began, time.perf_counter()


@contextlib.contextmanager
def keeping_sigterm_handler():
    """ray.init replaces the process's SIGTERM handler with sys.exit (which, mid-run, ends in an abort with Ray's
    workers left behind); a handler the process installed itself (the launcher's clean stop,
    roll.pipeline.core.stopping) is put back. A process without one keeps Ray's."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)


RUN_ID_ENV = "ROLL_RUN_ID"  # set by the launcher; every process it starts inherits it (end_run_processes)


def mark_run_processes() -> str:
    """Tag this process's environment with a value of its own, so that the processes it starts — a local Ray's
    GCS, raylet, agents and workers inherit it — can be found from outside (end_run_processes). Workers of an
    attached cluster are started by that cluster and do not carry it."""
    os.environ[RUN_ID_ENV] = f"{os.getpid()}-{uuid.uuid4().hex}"
    return os.environ[RUN_ID_ENV]


def end_run_processes() -> list[int]:
    """SIGKILL every other process whose environment carries this process's RUN_ID_ENV value; returns their pids.
    After ray.shutdown() only what it could not know of is left: the processes of a ray.init that a stop
    interrupted before Ray recorded them."""
    run_id = os.environ.get(RUN_ID_ENV)
    if not run_id:
        return []
    wanted, ended = f"{RUN_ID_ENV}={run_id}".encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            ended.append(int(entry))
        except OSError:  # gone meanwhile, or another user's
            pass
    return ended


def _worker_env(env_vars: dict | None) -> dict:
    """The workers' environment: WORKER_ENV (this process's values win), then `env_vars`, the Python path and
    the driver's directory."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    env_vars = {**{k: os.environ.get(k, v) for k, v in WORKER_ENV.items()}, **(env_vars or {})}
    os.environ.setdefault("RAY_DEDUP_LOGS", env_vars["RAY_DEDUP_LOGS"])  # read by the driver's log monitor
    # Workers import user modules named by dotted path (custom reward workers, environments) the way the
    # driver does, and resolve relative paths from the driver's directory. On a cluster these paths must
    # exist on every node: a shared filesystem, mounted at the same path everywhere (docs/cluster.md).
    paths = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env_vars["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env_vars[DRIVER_CWD_ENV] = os.getcwd()
    return env_vars


def _start_local(num_devices: int, env_vars: dict) -> None:
    """A Ray of this process's own: GPUs where torch sees them, else `num_devices` virtual devices."""
    import ray

    gpus = has_gpus()
    if not gpus:
        env_vars.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed otherwise warns that it found no GPU
    with keeping_sigterm_handler():
        ray.init(
            resources={} if gpus else {VIRTUAL_DEVICE: num_devices},
            include_dashboard=False,
            object_store_memory=1 << 30,
            runtime_env={"env_vars": env_vars},
            log_to_driver=True,
            configure_logging=False,
        )


def device_resource() -> str:
    """The Ray resource one device is: GPU when the cluster has GPUs, else the virtual device."""
    import ray

    return "GPU" if ray.cluster_resources().get("GPU", 0) > 0 else VIRTUAL_DEVICE


@dataclass(frozen=True)
class DeviceNode:
    index: int  # ROLL's node number: device ids index * num_gpus_per_node ... (index + 1) * num_gpus_per_node - 1
    node_id: str
    ip: str
    devices: float  # how many of the device resource the node has (it may have more than the config uses)

    def __str__(self) -> str:
        return f"node {self.index} = {self.ip} (id {self.node_id[:8]})"


def device_nodes(num_nodes: int, num_gpus_per_node: int, prefer_free: bool = False) -> list[DeviceNode]:
    """The `num_nodes` nodes that hold the devices, in ROLL's node order: the driver's node first, then the
    others by IP address (then node id); nodes with fewer than `num_gpus_per_node` devices are passed over.
    `prefer_free`: nodes whose devices no other pipeline or job holds now come first (a second pipeline
    on a shared cluster takes the idle nodes instead of queueing behind the first); busy ones only where
    there are too few free. Raises ClusterDevicesError naming every node and what it has when there are
    not enough."""
    import ray

    resource = device_resource()
    driver = ray.get_runtime_context().get_node_id()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    alive.sort(key=lambda n: (n["NodeID"] != driver, _ip_key(n["NodeManagerAddress"]), n["NodeID"]))
    usable = [n for n in alive if n["Resources"].get(resource, 0) >= num_gpus_per_node]
    if len(usable) < num_nodes:
        raise ClusterDevicesError(_missing_devices(alive, resource, num_nodes, num_gpus_per_node, driver))
    chosen = usable[:num_nodes]
    if prefer_free:
        free = free_devices(resource)
        idle = [n for n in usable if free.get(n["NodeID"], 0) >= num_gpus_per_node]
        ids = {n["NodeID"] for n in (idle + [n for n in usable if n not in idle])[:num_nodes]}
        chosen = [n for n in usable if n["NodeID"] in ids]  # back in ROLL's node order
    return [
        DeviceNode(i, n["NodeID"], n["NodeManagerAddress"], n["Resources"].get(resource, 0))
        for i, n in enumerate(chosen)
    ]


def free_devices(resource: str) -> dict:
    """node id → devices no placement group or actor holds now: the lower of Ray's available count (which
    lags a moment behind a new reservation) and the node's total less what created placement groups hold."""
    import ray
    from ray._private.state import available_resources_per_node

    total = {n["NodeID"]: n["Resources"].get(resource, 0) for n in ray.nodes() if n.get("Alive")}
    held = dict.fromkeys(total, 0.0)
    for group in ray.util.placement_group_table().values():
        if group.get("state") != "CREATED":
            continue
        for index, node in group.get("bundles_to_node_id", {}).items():
            if node in held:
                held[node] += group["bundles"].get(index, {}).get(resource, 0)
    available = available_resources_per_node()
    return {node: min(total[node] - held[node], available.get(node, {}).get(resource, 0)) for node in total}


def _ip_key(ip: str):
    try:
        return (0, ipaddress.ip_address(ip))
    except ValueError:
        return (1, ip)


def _missing_devices(alive: list, resource: str, num_nodes: int, per_node: int, driver: str) -> str:
    what = "GPUs" if resource == "GPU" else f"'{VIRTUAL_DEVICE}' (virtual devices: this cluster has no GPUs)"
    lines = [
        f"the Ray cluster lacks devices: the config needs num_nodes={num_nodes} nodes with "
        f"num_gpus_per_node={per_node} {what} each; nodes with that many: "
        f"{sum(n['Resources'].get(resource, 0) >= per_node for n in alive)} of {len(alive)}:"
    ]
    for n in alive:
        has = n["Resources"].get(resource, 0)
        tags = ", ".join(
            t
            for t, on in (("head", "node:__internal_head__" in n["Resources"]), ("driver", n["NodeID"] == driver))
            if on
        )
        verdict = "ok" if has >= per_node else f"missing {per_node - has:g}"
        lines.append(
            f"  node {n['NodeManagerAddress']} (id {n['NodeID'][:8]}{', ' + tags if tags else ''}): "
            f"{resource}={has:g}, CPU={n['Resources'].get('CPU', 0):g} -> {verdict}"
        )
    if resource == "GPU":
        lines.append("Add GPU nodes, or lower num_nodes / num_gpus_per_node to what the cluster has.")
    else:
        lines.append(
            f"On CPU-only machines start every node with its virtual devices, e.g. "
            f"`ray start --address=HEAD:6379 --resources='{{\"{VIRTUAL_DEVICE}\": {per_node}}}'`, "
            f"or lower num_nodes / num_gpus_per_node (docs/cluster.md)."
        )
    return "\n".join(lines)
