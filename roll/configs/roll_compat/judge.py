"""ROLL's judge server: a top-level `reward_model` role that serves the judge model, and a reward domain with
judge_model_type: cluster whose workers send it their prompts.

roll's LLM judge runs the judge engine in the reward role itself (judge_model_type: inference), so the server's
settings move into that domain: the same model, engine, devices and sampling settings judge the same prompts.
What differs is the number of processes: ROLL's many client workers become the engine workers of the server's
devices (world_size follows device_mapping). Applied by roll.configs.roll_compat.translate.
"""

from roll.utils.logging import get_logger

logger = get_logger("roll.config")

SERVER_KEYS = (
    "model_args",
    "strategy_args",
    "device_mapping",
    "num_gpus_per_worker",
    "infer_batch_size",
    "generating_args",
    "system_envs",
)
ROLL_SERVER_WORKERS = (None, "roll.pipeline.base_worker.InferWorker")


def judge_server(data: dict) -> list:
    """Moves `reward_model` into its one judge_model_type: cluster domain; (key path, message) problems."""
    server = data.pop("reward_model", None)
    if server is None:
        return []
    if not isinstance(server, dict):
        return [("reward_model", f"'reward_model' = {server!r}: expected ROLL's judge-server role (a mapping)")]
    rewards = data.get("rewards") or {}
    clients = [d for d, r in rewards.items() if isinstance(r, dict) and r.get("judge_model_type") == "cluster"]
    if len(clients) != 1:
        return [
            (
                "reward_model",
                f"'reward_model' (ROLL's judge server) needs exactly one rewards.<domain> with judge_model_type: "
                f"cluster to move into; found {clients or 'none'} (roll runs one judge engine per reward domain)",
            )
        ]
    domain = clients[0]
    reward, path = rewards[domain], f"rewards.{domain}"
    problems = []
    unknown = sorted(set(server) - set(SERVER_KEYS) - {"name", "worker_cls", "data_args"})
    problems += [
        (f"reward_model.{k}", f"unknown key 'reward_model.{k}' (valid: {', '.join(SERVER_KEYS)})") for k in unknown
    ]
    if server.get("worker_cls") not in ROLL_SERVER_WORKERS:
        problems.append(("reward_model.worker_cls", f"'reward_model.worker_cls' = {server['worker_cls']!r}: ROLL's "
                         f"InferWorker only (the judge engine)"))  # fmt: skip
    own = (reward.get("model_args") or {}).get("model_name_or_path")
    served = (server.get("model_args") or {}).get("model_name_or_path")
    if own is not None and served is not None and own != served:
        problems.append((f"{path}.model_args", f"'{path}.model_args.model_name_or_path' = {own!r} differs from the "
                         f"judge server's {served!r}: ROLL judges with the server's model; set one"))  # fmt: skip
    for key in ("strategy_args", "device_mapping"):
        if key in reward and key in server and reward[key] != server[key]:
            problems.append((f"{path}.{key}", f"'{path}.{key}' and 'reward_model.{key}' differ: set it once"))
    if problems:
        return problems
    for key in SERVER_KEYS:
        if key in server and (key not in reward or key in ("model_args", "strategy_args", "device_mapping")):
            reward[key] = server[key]
    clients_count = reward.pop("world_size", None)
    reward["judge_model_type"] = "inference"
    logger.warning(
        "'reward_model' (ROLL's judge server) runs as %s's own judge engine (judge_model_type: inference) on %s; "
        "ROLL's %s client workers are not needed",
        path,
        server.get("device_mapping"),
        clients_count if clients_count is not None else "its",
    )
    return []
