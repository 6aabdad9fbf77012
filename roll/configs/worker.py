"""Per-role configuration: `actor_train`, `actor_infer`, `reference`, `critic`, `rewards.<domain>`.

Each role names a strategy (the engine) and a `device_mapping` (which device ids its workers use).
Roles whose ids overlap are colocated; disjoint ids are separate — on GPUs or on the virtual devices
of a CPU-only machine alike.
"""

from dataclasses import dataclass
from typing import Any, Literal

from roll.configs.loader import ConfigError, field_help, parse_device_mapping

Dtype = Literal["float32", "bfloat16", "float16"]


@dataclass
class ModelArgs:
    model_name_or_path: str = field_help(help="HF model directory (config, weights, tokenizer) this role loads")
    dtype: Dtype = field_help("float32", "parameter dtype; bfloat16 on GPUs, float32 on CPU (bf16 is ~5x slower there)")
    disable_gradient_checkpointing: bool = field_help(
        False, "train without activation checkpointing (faster, more memory); only read by training strategies"
    )
    # LoRA (ROLL's key names): on when lora_target or adapter_name_or_path is set; actor_train only, with a
    # strategy whose class has `lora = True` (docs/strategies.md, LoRA)
    lora_target: str | None = field_help(
        None,
        "modules that get LoRA adapters: 'all-linear' (every linear layer but the output layer), a "
        "comma-separated list of module names (e.g. 'q_proj,v_proj'), or a regex matched against full module "
        "names (e.g. '.*\\.(q_proj|v_proj)'); null = no LoRA (full fine-tuning)",
    )
    lora_rank: int = field_help(8, "LoRA rank r of every adapter (≥ 1)")
    lora_alpha: float | None = field_help(
        None, "LoRA scaling numerator: adapters are scaled by lora_alpha / lora_rank; null = 2 × lora_rank"
    )
    lora_dropout: float = field_help(0.0, "dropout on the adapters' input, in [0, 1)")
    adapter_name_or_path: str | None = field_help(
        None,
        "a saved LoRA adapter (peft format, e.g. a checkpoint's adapter/ folder) to continue training from; "
        "its own adapter_config.json then sets target, rank, alpha and dropout",
    )

    @property
    def lora(self) -> bool:
        return bool(self.lora_target) or bool(self.adapter_name_or_path)

    @property
    def resolved_lora_alpha(self) -> float:
        return 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha


@dataclass
class TrainingArgs:
    learning_rate: float = field_help(1e-6, "AdamW learning rate")
    weight_decay: float = field_help(0.0, "AdamW weight decay")
    adam_beta1: float = field_help(0.9, "AdamW beta1")
    adam_beta2: float = field_help(0.999, "AdamW beta2")
    adam_epsilon: float = field_help(1e-8, "AdamW epsilon")
    per_device_train_batch_size: int = field_help(1, "rows per micro-batch per data-parallel rank")
    gradient_accumulation_steps: int = field_help(1, "micro-batches accumulated into one optimizer step")
    max_grad_norm: float = field_help(1.0, "gradient-norm clipping threshold")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = field_help("constant", "learning-rate schedule")
    warmup_steps: int = field_help(0, "optimizer steps of linear warm-up")


@dataclass
class DataArgs:
    file_name: str | list[str] | None = field_help(
        None, "prompt file(s): .json, .jsonl, .csv or .parquet (one format per role), read with `datasets`"
    )
    prompt_key: str = field_help("prompt", "column holding the prompt text")
    messages_key: str = field_help("messages", "column holding chat messages (used instead of prompt_key when present)")
    ground_truth_key: str = field_help("ground_truth", "column holding the reference answer for reward workers")
    tag_key: str = field_help("tag", "column whose value selects the reward domain (rewards.<domain>.tag_included)")
    apply_chat_template: bool = field_help(True, "wrap prompts with the tokenizer's chat template")
    on_long_prompt: Literal["drop", "error"] = field_help(
        "drop", "prompts longer than prompt_length: drop them (count logged) or stop with an error"
    )


@dataclass
class GeneratingArgs:
    max_new_tokens: int | None = field_help(None, "tokens generated per sample; null means response_length")
    temperature: float = field_help(1.0, "sampling temperature (log-probs everywhere use the same temperature)")
    top_p: float = field_help(1.0, "nucleus sampling; < 1 makes rollout log-probs differ from the trainer's")
    top_k: int = field_help(0, "top-k sampling (0 = off); > 0 makes rollout log-probs differ from the trainer's")
    do_sample: bool = field_help(True, "sample (true) or decode greedily (false)")
    num_return_sequences: int | None = field_help(
        None, "samples per prompt; null means num_return_sequences_in_group (validation: 1)"
    )

    def __post_init__(self):
        if not self.temperature > 0:
            raise ConfigError(
                f"'temperature' = {self.temperature}: must be > 0 (log-probs divide by it; "
                f"use do_sample: false for greedy decoding)"
            )
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"'top_p' = {self.top_p}: must be in (0, 1] (1 = off)")
        if self.top_k < 0:
            raise ConfigError(f"'top_k' = {self.top_k}: must be >= 0 (0 = off)")


@dataclass
class StrategyArgs:
    strategy_name: str = field_help(
        help="engine: deepspeed_train, fsdp2_train (training roles); hf_infer, vllm "
        "(rollout); hf_infer, deepspeed_infer, fsdp2_infer (reference); "
        "what runs where: docs/strategies.md"
    )
    strategy_config: dict[str, Any] | None = field_help(
        None, "engine settings, e.g. a DeepSpeed config via `${deepspeed_zero2}` (see examples/config/)"
    )


@dataclass
class WorkerConfig:
    name: str = field_help("", "filled in from the role's key (actor_train, rewards.math, ...); do not set")
    worker_cls: str | None = field_help(
        None, "dotted path of the Ray worker class; null picks the role's default (ActorWorker, CriticWorker)"
    )
    model_args: ModelArgs | None = field_help(None, "the model this role loads (not needed by rule rewards)")
    training_args: TrainingArgs = field_help(
        default_factory=TrainingArgs, help="optimizer and batch settings (training roles)"
    )
    data_args: DataArgs = field_help(default_factory=DataArgs, help="prompt data (actor_train: the training prompts)")
    generating_args: GeneratingArgs = field_help(default_factory=GeneratingArgs, help="sampling settings (actor_infer)")
    strategy_args: StrategyArgs | None = field_help(None, "which engine runs this role")
    device_mapping: list[int] | str | None = field_help(
        None, "device ids of this role's workers: a list or 'list(range(a,b))'; null = CPU-only workers"
    )
    num_gpus_per_worker: int = field_help(1, "devices per worker; world_size = len(device_mapping) / this")
    world_size: int | None = field_help(
        None, "number of workers; derived from device_mapping when that is set, else required (default 1)"
    )
    infer_batch_size: int = field_help(16, "rows per forward pass when computing log-probs or generating")
    # token-budget micro-batches and packing (ROLL's key names); support per strategy: docs/strategies.md
    use_dynamic_batching_in_train: bool = field_help(
        False,
        "training roles: form each optimizer step's micro-batches by a token budget instead of "
        "per_device_train_batch_size rows (the step still takes per_device × accumulation rows)",
    )
    max_tokens_per_microbatch_in_train: int | None = field_help(
        None,
        "real (unpadded) tokens per training micro-batch with use_dynamic_batching_in_train; "
        "≥ prompt_length + response_length",
    )
    use_dynamic_batching_in_infer: bool = field_help(
        False,
        "scoring forwards (log-probs, values, Σπ²) in micro-batches by a token budget instead of "
        "infer_batch_size rows; generation is not affected",
    )
    max_tokens_per_microbatch_in_infer: int | None = field_help(
        None,
        "real (unpadded) tokens per scoring micro-batch with use_dynamic_batching_in_infer; "
        "≥ prompt_length + response_length",
    )
    use_sequence_packing: bool = field_help(
        False,
        "concatenate each micro-batch's rows into one row without padding (position ids restart per "
        "row) for training and scoring forwards; HF-module strategies only",
    )
    rpc_timeout: float = field_help(1800.0, "seconds any call to this role may take before the step fails")
    start_timeout: float = field_help(
        300.0, "seconds a worker process of this role may take to start (imports, placement) before start-up fails"
    )

    def __post_init__(self):
        self.device_mapping = parse_device_mapping(self.device_mapping, f"{self.name or 'worker'}.device_mapping")
        for key in ("rpc_timeout", "start_timeout"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"'{self.name}.{key}' = {getattr(self, key)}: must be > 0 seconds")
        if self.num_gpus_per_worker < 1:
            raise ConfigError(f"'{self.name}.num_gpus_per_worker' = {self.num_gpus_per_worker}: must be ≥ 1")


@dataclass
class RewardConfig(WorkerConfig):
    tag_included: list[str] = field_help(
        default_factory=list, help="data tags routed to this domain; empty with one domain = every row"
    )
    timeout: float = field_help(
        5.0,
        "per-sample grading time limit in seconds, honoured by workers that grade through "
        "RewardWorker.grade_rows (the built-in math and multiple-choice workers): a sample past it scores 0 "
        "and counts in reward/<domain>/timeouts",
    )
    reward_args: dict[str, Any] = field_help(
        default_factory=dict, help="free-form settings for a custom reward worker (self.worker_config.reward_args)"
    )
    response_length_penalty_coef: float = field_help(
        0.0,
        "CrossThinkQA worker only: weight of its length reward (ROLL's key; -0.5 below 100 response tokens of "
        "padded width, 0 above 400, linear between; docs/rewards.md)",
    )
    judge_model_type: str = field_help(
        "inference",
        "LLM-judge worker: 'inference' = this role loads model_args and generates with strategy_args "
        "(hf_infer or vllm) on its device_mapping; 'api' = POST to judge_api_url (OpenAI chat completions)",
    )
    judge_prompt: str = field_help(
        "",
        "LLM-judge worker: the prompt template; {question}, {response} and {reference} are filled in per row "
        "(empty = the built-in yes/no template in roll/workers/rewards/llm_judge.py)",
    )
    judge_verdict: str = field_help(
        "yes_no",
        "LLM-judge worker: how the judge's reply is read: 'yes_no' (first YES/NO word: 1/0) or 'score' (last "
        "number in the reply divided by judge_score_max, clipped to [0, 1])",
    )
    judge_score_max: float = field_help(10.0, "LLM-judge worker, judge_verdict 'score': the judge's top score")
    judge_max_new_tokens: int = field_help(32, "LLM-judge worker: tokens the judge may write per verdict")
    judge_api_url: str | None = field_help(
        None, "LLM-judge worker, judge_model_type 'api': base URL of an OpenAI-compatible server (…/v1)"
    )
    judge_api_model: str = field_help("judge", "LLM-judge worker, 'api': the `model` field of each request")
    judge_api_key_env: str | None = field_help(
        None, "LLM-judge worker, 'api': name of the environment variable holding the bearer key (null = no key)"
    )
    judge_retries: int = field_help(2, "LLM-judge worker, 'api': extra attempts per request after a failure")
    judge_batch_size: int = field_help(8, "LLM-judge worker: verdicts requested at once (concurrent API calls)")


@dataclass
class ValidationConfig:
    data_args: DataArgs = field_help(default_factory=DataArgs, help="held-out prompt file(s)")
    generating_args: GeneratingArgs = field_help(
        default_factory=lambda: GeneratingArgs(do_sample=False, num_return_sequences=1),
        help="sampling for validation (greedy by default); num_return_sequences n > 1 (with do_sample: true) "
        "adds val/pass@k for k = 1, 2, 4, … ≤ n and k = n",
    )
    pass_score: float = field_help(
        1.0,
        "a validation sample passes (for pass@k) when its score ≥ this; 1.0 = full marks of the built-in "
        "0/1 rule rewards",
    )
