"""LLM-judge reward: a judge model reads (question, response, reference) through `judge_prompt` and its
reply is parsed as a yes/no verdict or a score.

judge_model_type 'inference': this reward role is the judge's own cluster; it loads `model_args` with
`strategy_args` (hf_infer or vllm) on its `device_mapping` and generates greedily, `judge_batch_size` prompts
per call. 'api': each prompt is POSTed to `judge_api_url`/chat/completions (OpenAI shape), up to
`judge_batch_size` at once, each with `timeout` seconds and `judge_retries` retries. A reply that cannot be
parsed, or a request that keeps failing, scores 0 and counts in reward/<domain>/errors.
"""

import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from transformers import AutoTokenizer

from roll.configs.worker import ROLL_JUDGE_PROMPTS
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.strategies import create_strategy
from roll.utils.grading import ERROR
from roll.workers.rewards.base import RewardWorker

DEFAULT_PROMPT = (
    "Question: {question}\nReference answer: {reference}\nStudent answer: {response}\n"
    "Is the student answer equivalent to the reference answer? Reply YES or NO."
)
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_verdict(reply: str, kind: str, score_max: float) -> float | None:
    """1/0 for the first YES/NO word ('yes_no'), or the last number / score_max clipped to [0, 1] ('score');
    None when the reply holds no verdict."""
    if kind == "yes_no":
        found = _YES_NO.search(reply)
        return None if found is None else float(found.group(1).lower() == "yes")
    if kind == "score":
        numbers = _NUMBER.findall(reply)
        return None if not numbers else min(max(float(numbers[-1]) / score_max, 0.0), 1.0)
    raise ValueError(f"judge_verdict {kind!r}: expected 'yes_no' or 'score'")


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of `messages` under the tokenizer's chat template, ready for the assistant's reply."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def chat_completion(url: str, model: str, prompt: str, max_tokens: int, timeout: float, retries: int, key=None) -> str:
    """The assistant message of one OpenAI-style chat completion; retries with back-off, then raises."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    error = None
    for attempt in range(retries + 1):
        try:
            request = urllib.request.Request(url.rstrip("/") + "/chat/completions", body, headers)
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.load(response)["choices"][0]["message"]["content"]
        except Exception as failure:  # network, HTTP status, malformed body: all retried
            error = failure
            time.sleep(min(0.5 * 2**attempt, 5))
    raise RuntimeError(f"LLM judge: {url}/chat/completions failed {retries + 1} times: {error!r}")


class LLMJudgeRewardWorker(RewardWorker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        config = self.worker_config
        parse_verdict("", config.judge_verdict, config.judge_score_max)  # a bad judge_verdict fails at start
        if config.judge_model_type == "api":
            if not config.judge_api_url:
                raise ValueError(f"{self.worker_name}: judge_model_type 'api' needs judge_api_url")
            if config.judge_api_key_env and config.judge_api_key_env not in os.environ:
                raise ValueError(f"{self.worker_name}: judge_api_key_env {config.judge_api_key_env!r} is not set")
        elif config.judge_model_type == "inference":
            if config.model_args is None or config.strategy_args is None:
                raise ValueError(f"{self.worker_name}: judge_model_type 'inference' needs model_args and strategy_args")
            self.strategy = create_strategy(config.strategy_args.strategy_name, self)
            self.strategy.initialize(total_steps=total_steps)
            self.tokenizer = AutoTokenizer.from_pretrained(config.model_args.model_name_or_path)
        else:
            raise ValueError(f"{self.worker_name}.judge_model_type {config.judge_model_type!r}: 'inference' or 'api'")

    def judge_prompts(self, batch: DataProto) -> list[str]:
        template = self.worker_config.judge_prompt
        if not template or template in ROLL_JUDGE_PROMPTS:  # ROLL's named prompt asks the same YES/NO question
            template = DEFAULT_PROMPT
        columns = batch.non_tensor_batch
        questions = columns.get("prompt_text", np.array([""] * len(batch), dtype=object))
        return [
            template.format(question=q, response=r, reference=t)
            for q, r, t in zip(questions, columns["response_text"], columns["ground_truth"])
        ]

    def ask(self, prompts: list[str]) -> list[str | BaseException]:
        config = self.worker_config
        if config.judge_model_type == "api":
            key = os.environ[config.judge_api_key_env] if config.judge_api_key_env else None

            def one(prompt):
                try:
                    return chat_completion(
                        config.judge_api_url, config.judge_api_model, prompt, config.judge_max_new_tokens,
                        config.timeout, config.judge_retries, key,
                    )  # fmt: skip
                except Exception as error:
                    return error

            with ThreadPoolExecutor(max(1, config.judge_batch_size)) as pool:
                return list(pool.map(one, prompts))
        return self._generate(prompts)

    def _generate(self, prompts: list[str]) -> list[str]:
        tokenizer = self.tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        replies = []
        for start in range(0, len(prompts), max(1, self.worker_config.judge_batch_size)):
            chunk = prompts[start : start + self.worker_config.judge_batch_size]
            ids = [chat_ids(tokenizer, [{"role": "user", "content": p}]) for p in chunk]
            width = max(map(len, ids))
            prompts_t = torch.tensor([[pad] * (width - len(x)) + x for x in ids])  # left-padded
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            batch = DataProto.from_dict(tensors={"prompts": prompts_t, "input_ids": prompts_t, "attention_mask": mask})
            generation = {"max_new_tokens": self.worker_config.judge_max_new_tokens, "do_sample": False}
            out = self.strategy.generate(batch, {**generation, "num_return_sequences": 1})
            replies += tokenizer.batch_decode(out.batch["responses"], skip_special_tokens=True)
        return replies

    def score(self, batch: DataProto) -> list[float]:
        config = self.worker_config
        scores = []
        for row, reply in enumerate(self.ask(self.judge_prompts(batch))):
            verdict = (
                None
                if isinstance(reply, BaseException)
                else parse_verdict(reply, config.judge_verdict, config.judge_score_max)
            )
            if verdict is None:
                error = (
                    reply if isinstance(reply, BaseException) else ValueError(f"no verdict in judge reply {reply!r}")
                )
                if self._grading_status is not None:
                    self._grading_status[row] = ERROR
                self._log_failure(batch, row, ERROR, error)
            scores.append(0.0 if verdict is None else verdict)
        return scores
