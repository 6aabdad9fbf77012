"""The driver's turn loop: environment workers ask, the rollout engine answers, until every episode ends.

Each turn gathers the pending prompts of all environments, generates one reply per prompt in one
batched call per token budget (`actor_infer.generate`), and hands the exact reply ids and their
log-probs back to the environments. Finished episodes become training rows (`to_batch`).
"""

import numpy as np
import torch

from roll.distributed.cluster import Cluster
from roll.distributed.data_proto import DataProto
from roll.utils.functional import compute_position_ids, left_pad

ROW_KEYS = ("tag", "traj_group_id", "traj_id", "env_id", "success", "num_turns", "invalid_actions", "truncated")


class EnvRollout:
    def __init__(
        self, envs: Cluster, actor_infer: Cluster, num_envs: int, pad_token_id: int, token_cap: int | None = None
    ):
        self.envs, self.actor_infer = envs, actor_infer
        self.env_ids = list(range(num_envs))
        self.pad_token_id = pad_token_id
        self.token_cap = token_cap  # actor_infer.generating_args.max_new_tokens: a turn's budget is at most this
        # async partial_rollout: every generate call passes this gate (roll.pipeline.agentic.async_rollout), which
        # yields the policy version it runs on; rows then carry their episode's oldest version
        self.gate = None
        self.versions: dict[int, tuple[int, int]] = {}  # env id → (oldest, newest) version of its episode's turns

    def run(
        self, assignments: dict, generation: dict, seed: int, with_transcripts: bool = False
    ) -> tuple[list[dict], list[dict], list[dict]]:
        """assignments: env id → (seed, group_id, traj_id). Returns (training rows, episode stats, readable
        transcripts if asked)."""
        self.envs.start(assignments)
        self.versions = {}
        turn = 0
        while True:
            requests = [r for per_worker in self.envs.requests() for r in per_worker]
            if not requests:
                break
            self.envs.apply(self._generate(requests, generation, seed * 1000 + turn))
            turn += 1
        transcripts = [t for part in self.envs.transcripts(self.env_ids) for t in part] if with_transcripts else []
        rows, episodes = [], []
        for worker_rows, worker_episodes in self.envs.collect(self.env_ids):
            rows += worker_rows
            episodes += worker_episodes
        if self.gate is not None:
            for row in rows:
                oldest, newest = self.versions[row["env_id"]]
                row["policy_version"], row["policy_version_span"] = oldest, newest - oldest
        return rows, episodes, transcripts

    def _generate(self, requests: list, generation: dict, seed: int) -> dict:
        """env id → (reply ids, log-probs), one generate call per distinct max_new_tokens."""
        replies = {}
        for budget in sorted({r[2] for r in requests}):
            part = [r for r in requests if r[2] == budget]
            prompts, mask = left_pad([ids for _, ids, _ in part], self.pad_token_id)
            batch = DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": mask})
            batch.meta_info.update(
                generation_config={
                    **generation,
                    "num_return_sequences": 1,
                    "max_new_tokens": min(budget, self.token_cap or budget),
                },
                seed=seed,
            )
            batch, _ = batch.pad_to_multiple(self.actor_infer.world_size)
            if self.gate is None:
                out = self.actor_infer.generate(batch)
            else:
                with self.gate.turn() as version:  # no weight sync while this call runs
                    out = self.actor_infer.generate(batch)
                for env_id, _, _ in part:
                    oldest, newest = self.versions.get(env_id, (version, version))
                    self.versions[env_id] = (min(oldest, version), max(newest, version))
            lengths = out.batch["response_mask"].sum(-1).long()
            for row, (env_id, _, _) in enumerate(part):
                n = int(lengths[row])
                replies[env_id] = (
                    out.batch["responses"][row, :n].tolist(),
                    out.batch["rollout_log_probs"][row, :n].tolist(),
                )
        return replies


def to_batch(rows: list[dict], prompt_length: int, response_length: int, pad_token_id: int) -> DataProto:
    """Training rows → the RLVR batch layout (docs/contracts.md): prompts left-padded to prompt_length,
    responses right-padded to response_length; `attention_mask` covers every real token (observations
    included), `response_mask` only the generated ones."""
    for row in rows:
        p, r = row["prompt_ids"], row["response_ids"]
        if len(p) > prompt_length or len(r) > response_length:
            raise ValueError(
                f"env {row['env_id']} ({row['tag']}): a sample has {len(p)} prompt / {len(r)} response "
                f"tokens, over prompt_length {prompt_length} / response_length {response_length}"
            )
    prompts, prompt_mask = left_pad([row["prompt_ids"] for row in rows], pad_token_id, width=prompt_length)
    size = len(rows)
    responses = torch.full((size, response_length), pad_token_id, dtype=torch.long)
    response_attention = torch.zeros((size, response_length), dtype=torch.long)
    response_mask = torch.zeros((size, response_length))
    log_probs = torch.zeros((size, response_length))
    for i, row in enumerate(rows):
        r = row["response_ids"]
        responses[i, : len(r)] = torch.tensor(r)
        response_attention[i, : len(r)] = 1
        response_mask[i, : len(r)] = torch.tensor(row["response_mask"], dtype=torch.float32)
        log_probs[i, : len(r)] = torch.tensor(row["rollout_log_probs"], dtype=torch.float32)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_ids(attention_mask),
        "response_mask": response_mask,
        "rollout_log_probs": log_probs,
        "scores": torch.tensor([row["score"] for row in rows], dtype=torch.float32),
    }
    non_tensors = {key: np.array([row[key] for row in rows], dtype=object) for key in ROW_KEYS}
    non_tensors["state"] = np.array([row.get("state", "") for row in rows], dtype=object)  # step rows only
    if all("policy_version" in row for row in rows):  # async partial_rollout: the episode's oldest version
        for key in ("policy_version", "policy_version_span"):
            non_tensors[key] = np.array([row[key] for row in rows], dtype=object)
    if all("episode_score" in row for row in rows):  # every env manager's row has it (GiGPO reads it)
        non_tensors["episode_score"] = np.array([float(row["episode_score"]) for row in rows], dtype=object)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
