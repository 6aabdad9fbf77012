"""Per-role configuration: `actor_train`, `actor_infer`, `reference`, `critic`, `rewards.<domain>`.

Each role names a strategy (the engine) and a `device_mapping` (which device ids its workers use).
Roles whose ids overlap are colocated; disjoint ids are separate — on GPUs or on the virtual devices
of a CPU-only machine alike.
"""

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from roll.configs.loader import ConfigError, field_help, parse_device_mapping
from roll.configs.profiler import RoleProfilerConfig
from roll.utils.logging import get_logger

logger = get_logger("roll.config")
Dtype = Literal["float32", "bfloat16", "float16"]
CROSSTHINKQA_WORKER = "roll.workers.rewards.crossthinkqa_rule.CrossThinkQARuleRewardWorker"


@dataclass
class ModelArgs:
    model_name_or_path: str = field_help(help="HF model directory (config, weights, tokenizer) this role loads")
    dtype: Dtype = field_help("float32", "parameter dtype; bfloat16 on GPUs, float32 on CPU (bf16 is ~5x slower there)")
    model_type: Literal["auto_token_classification", "trl", "auto_sequence_classification"] | None = field_help(
        None,
        "ROLL's model class key: null = a causal LM (the model roles) or the critic's value model; "
        "auto_token_classification = the critic's value model (AutoModelForTokenClassification, 1 label), critic "
        "only; trl = an LLM judge that generates (ROLL adds a value head a generating judge never uses), "
        "rewards.<domain> with the LLM-judge worker only; auto_sequence_classification is refused (roll has no "
        "classifier reward-model worker)",
    )
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2", "fa2"] | None = field_help(
        None,
        "attention kernel of HF-module strategies (transformers' attn_implementation; fa2 = flash_attention_2, "
        "which needs the flash-attn package and a GPU); null = transformers' default. vLLM/SGLang pick their own",
    )
    ulysses_size: int | None = field_help(
        1,
        "Ulysses sequence parallelism (ROLL's key): groups of this many consecutive ranks share each row, every rank "
        "runs 1/ulysses_size of the sequence and attention all-to-alls heads across the group; the role's data-"
        "parallel size becomes world_size / ulysses_size. 1 or null = off. fsdp2_train / fsdp2_infer only; the "
        "model's attention heads must divide by it (KV heads divide it or by it)",
        bounds="[1, inf)",
    )
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
    lora_rank: int = field_help(8, "LoRA rank r of every adapter (≥ 1)", bounds="[1, inf)")
    lora_alpha: float | None = field_help(
        None,
        "LoRA scaling numerator: adapters are scaled by lora_alpha / lora_rank; null = 2 × lora_rank",
        bounds="(0, inf)",
    )
    lora_dropout: float = field_help(0.0, "dropout on the adapters' input, in [0, 1)", bounds="[0, 1)")
    adapter_name_or_path: str | None = field_help(
        None,
        "a saved LoRA adapter (peft format, e.g. a checkpoint's adapter/ folder) to continue training from; "
        "its own adapter_config.json then sets target, rank, alpha and dropout",
    )

    freeze_module_prefix: str | None = field_help(
        None,
        "freeze (requires_grad false, so the optimizer never updates them) every parameter whose name starts "
        "with one of these comma-separated prefixes, as ROLL's partial fine-tuning (e.g. 'model.embed_tokens'); "
        "names are the HF module's (model.named_parameters()); a prefix no parameter has is an error when the "
        "model loads; training roles of deepspeed_train / fsdp2_train",
    )

    @property
    def frozen_prefixes(self) -> list[str]:
        return [p.strip() for p in (self.freeze_module_prefix or "").split(",") if p.strip()]

    @property
    def lora(self) -> bool:
        return bool(self.lora_target) or bool(self.adapter_name_or_path)

    @property
    def resolved_lora_alpha(self) -> float:
        return 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha


@dataclass
class TrainingArgs:
    num_train_epochs: float | None = field_help(
        None,
        "actor_train (RLVR): with max_steps null, the run is ceil(epochs × training prompts / rollout_batch_size) "
        "steps, computed when the prompts are loaded; a set max_steps overrides it (HF TrainingArguments)",
        bounds="(0, inf)",
    )
    learning_rate: float = field_help(1e-6, "AdamW learning rate", bounds="[0, inf)")
    weight_decay: float = field_help(0.0, "AdamW weight decay", bounds="[0, inf)")
    adam_beta1: float = field_help(0.9, "AdamW beta1", bounds="[0, 1)")
    adam_beta2: float = field_help(0.999, "AdamW beta2", bounds="[0, 1)")
    adam_epsilon: float = field_help(1e-8, "AdamW epsilon", bounds="[0, inf)")
    per_device_train_batch_size: int = field_help(1, "rows per micro-batch per data-parallel rank", bounds="[1, inf)")
    gradient_accumulation_steps: int = field_help(
        1, "micro-batches accumulated into one optimizer step", bounds="[1, inf)"
    )
    max_grad_norm: float = field_help(1.0, "gradient-norm clipping threshold", bounds="(-inf, inf)")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = field_help("constant", "learning-rate schedule")
    warmup_steps: int = field_help(0, "optimizer steps of linear warm-up", bounds="[0, inf)")
    warmup_ratio: float = field_help(
        0.0,
        "with warmup_steps 0: warm up over ceil(warmup_ratio × the run's optimizer steps) instead (ROLL's key)",
        bounds="[0, 1]",
    )


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
    chat_template: Literal["chatml", "qwen3"] | None = field_help(
        None,
        "with apply_chat_template: null = the tokenizer's own template; chatml = the ChatML format "
        "(<|im_start|>role ... <|im_end|>) whatever the tokenizer has; qwen3 = the tokenizer's template with "
        "enable_thinking (ROLL's template names, see data_args.template in docs/roll_compatibility.md)",
    )
    on_long_prompt: Literal["drop", "error"] = field_help(
        "drop", "prompts longer than prompt_length: drop them (count logged) or stop with an error"
    )
    domain_interleave_probs: dict[str, float] | None = field_help(
        None,
        "actor_train: share of each reward domain in every step's prompts (ROLL): domain d gets "
        "int(p_d × rollout_batch_size) prompts, the last listed domain the rest; each domain's rows are drawn "
        "in their own shuffled order. Shares ≥ 0 summing to at most 1 (what they leave goes to the last domain, as "
        "in ROLL); every domain of the data listed (0 = unused)",
        bounds="[0, 1]",
    )
    interleave_probs: str | list[float] | None = field_help(
        None,
        "actor_train: with several file_name entries, each prompt comes from file i with probability p_i "
        "(a list, or ROLL's comma-separated string '0.7,0.3'); each file's rows in their own shuffled order. "
        "A single 1.0 (ROLL's default '1.0') = all files as one pool",
        bounds="[0, 1]",
    )
    preprocessing_num_workers: int | None = field_help(
        None, "processes `datasets` uses to read and prepare the data files (null = one)", bounds="[1, inf)"
    )

    def __post_init__(self):
        if self.chat_template is not None and not self.apply_chat_template:
            raise ConfigError(f"'chat_template' = {self.chat_template!r} needs apply_chat_template: true")
        if isinstance(self.interleave_probs, str):
            try:
                self.interleave_probs = [float(p) for p in self.interleave_probs.split(",")]
            except ValueError:
                raise ConfigError(
                    f"'interleave_probs' = {self.interleave_probs!r}: comma-separated numbers, e.g. '0.7,0.3'"
                ) from None
        if self.interleave_probs is not None:
            values = self.interleave_probs
            if any(v < 0 for v in values) or abs(sum(values) - 1) > 1e-6:
                raise ConfigError(
                    f"'interleave_probs' = {values}: probabilities must be ≥ 0 and sum to 1 (sum {sum(values)})"
                )
        if self.domain_interleave_probs is not None:  # quotas: ROLL gives what they leave to the last domain
            probs = self.domain_interleave_probs
            if any(v < 0 for v in probs.values()) or not 0 < sum(probs.values()) <= 1 + 1e-6:
                raise ConfigError(
                    f"'domain_interleave_probs' = {probs}: shares must be ≥ 0 with a sum in (0, 1] (sum "
                    f"{sum(probs.values())}); what they leave goes to the last listed domain"
                )
        files = [self.file_name] if isinstance(self.file_name, str) else self.file_name
        if self.interleave_probs == [1.0]:
            self.interleave_probs = None  # one probability for the whole data (ROLL's "1.0"): the files as one pool
        if self.interleave_probs is not None and files is not None and len(self.interleave_probs) != len(files):
            raise ConfigError(
                f"'interleave_probs' has {len(self.interleave_probs)} entries for {len(files)} file_name entries: "
                "give one probability per file"
            )
        if self.interleave_probs is not None and self.domain_interleave_probs is not None:
            raise ConfigError("set one of 'interleave_probs' (by file) and 'domain_interleave_probs' (by domain)")


@dataclass
class GeneratingArgs:
    max_new_tokens: int | None = field_help(
        None,
        "tokens generated per sample; null means response_length. Agentic actor_infer: a cap on each turn's "
        "custom_envs.<tag>.max_tokens_per_step (null = no cap)",
        bounds="[1, inf)",
    )
    temperature: float = field_help(
        1.0, "sampling temperature (log-probs everywhere use the same temperature)", bounds="(0, inf)"
    )
    top_p: float = field_help(
        1.0, "nucleus sampling; < 1 makes rollout log-probs differ from the trainer's", bounds="(0, 1]"
    )
    top_k: int = field_help(
        0,
        "top-k sampling (0 or ROLL's -1 = off); > 0 makes rollout log-probs differ from the trainer's",
        bounds="[0, inf)",
        also=(-1,),
    )
    do_sample: bool = field_help(True, "sample (true) or decode greedily (false)")
    num_return_sequences: int | None = field_help(
        None, "samples per prompt; null means num_return_sequences_in_group (validation: 1)", bounds="[1, inf)"
    )
    repetition_penalty: float = field_help(
        1.0,
        "divide the logits of tokens already in the sequence by this (> 0; 1 = off, ROLL/HF meaning); "
        "≠ 1 makes rollout log-probs differ from the trainer's",
        bounds="(0, inf)",
    )
    stop_strings: list[str] | None = field_help(
        None,
        "end a sample once its text contains one of these strings (kept in the response); vllm and sglang "
        "(ROLL passes them to those engines only; hf_infer refuses them)",
    )

    def __post_init__(self):
        if self.stop_strings is not None and (
            not self.stop_strings or not all(isinstance(s, str) and s for s in self.stop_strings)
        ):
            raise ConfigError(f"'stop_strings' = {self.stop_strings!r}: a non-empty list of non-empty strings, or null")
        if self.top_k == -1:
            self.top_k = 0  # ROLL's and vLLM's "off"; every engine here spells it 0


@dataclass
class StrategyArgs:
    strategy_name: str = field_help(
        help="engine: deepspeed_train, fsdp2_train (training roles); hf_infer, vllm "
        "(rollout); hf_infer, deepspeed_infer, fsdp2_infer (reference); "
        "what runs where: docs/strategies.md"
    )
    strategy_config: dict[str, Any] | None = field_help(
        None, "engine settings, e.g. a DeepSpeed config via `${deepspeed_zero2}` (shipped blocks: roll/configs/blocks/)"
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
        None,
        "device ids of this role's workers: a list or 'list(range(a,b))'; null = CPU-only workers",
        bounds="[0, inf)",
    )
    num_gpus_per_worker: int = field_help(
        1, "devices per worker; world_size = len(device_mapping) / this", bounds="[1, inf)"
    )
    world_size: int | None = field_help(
        None,
        "number of workers; derived from device_mapping when that is set, else required (default 1)",
        bounds="[1, inf)",
    )
    infer_batch_size: int = field_help(
        16, "rows per forward pass when computing log-probs or generating", bounds="[1, inf)"
    )
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
        bounds="[1, inf)",
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
        bounds="[1, inf)",
    )
    use_sequence_packing: bool = field_help(
        False,
        "concatenate each micro-batch's rows into one row without padding (position ids restart per "
        "row) for training and scoring forwards; HF-module strategies only",
    )
    profiler: RoleProfilerConfig | None = field_help(
        None, "this role's profiling; unset keys take the pipeline's `profiler` values (docs/profiling.md)"
    )
    rpc_timeout: float = field_help(
        1800.0, "seconds any call to this role may take before the step fails", bounds="(0, inf)"
    )
    system_envs: dict[str, str] = field_help(
        default_factory=dict,
        help="environment variables of this role's workers, over the pipeline's system_envs (ROLL's role-level key)",
    )
    start_timeout: float = field_help(
        300.0,
        "seconds a worker process of this role may take to start (imports, placement) before start-up fails",
        bounds="(0, inf)",
    )

    def __post_init__(self):
        self.device_mapping = parse_device_mapping(self.device_mapping, f"{self.name or 'worker'}.device_mapping")


@dataclass
class RewardFilterConfig:
    """ROLL's group filter of dynamic sampling (docs/algorithms.md, Dynamic sampling)."""

    type: Literal["no_filter", "mean_filter", "std_filter"] = field_help(
        "no_filter",
        "no_filter; mean_filter drops a prompt group whose mean reward is <= filter_args.threshold_down or "
        ">= filter_args.threshold_up; std_filter drops a group whose reward std (unbiased) is <= "
        "filter_args.std_threshold (0 = exactly the all-equal groups)",
    )
    filter_args: dict[str, float] = field_help(
        default_factory=dict,
        help="thresholds of the filter type: mean_filter reads threshold_up (default inf) and threshold_down "
        "(default -1); std_filter reads std_threshold (default -1); any other key is an error",
        bounds="[-inf, inf]",
    )

    def check(self, where: str) -> None:
        from roll.algorithms.group_filter import FILTER_ARGS

        unknown = sorted(set(self.filter_args) - set(FILTER_ARGS[self.type]))
        if unknown:
            raise ConfigError(
                f"'{where}.filter_args' has {unknown}, not read by type {self.type!r}; "
                f"valid keys: {sorted(FILTER_ARGS[self.type]) or 'none'}"
            )
        for key, value in self.filter_args.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(f"'{where}.filter_args.{key}' = {value!r}: must be a number")


_SCORER_NAME = re.compile(r"^[A-Za-z0-9_]+$")
ROLL_JUDGE_PROMPTS = ("Qwen2.5-7B-Instruct-RLVR-prompt",)  # ROLL's named judge prompts = roll's YES/NO prompt


def _check_judge_prompt(where: str, template: str) -> None:
    if not template or template in ROLL_JUDGE_PROMPTS:
        return
    try:
        template.format(question="", response="", reference="")
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"'{where}.judge_prompt': not a template of {{question}}, {{response}}, {{reference}} ({error!r}); "
            f"write literal braces as {{{{ }}}}, or name one of {list(ROLL_JUDGE_PROMPTS)}"
        ) from None
    if "{response}" not in template:
        raise ConfigError(
            f"'{where}.judge_prompt' has no {{response}}: the judge would never see the reply; add it, or name one "
            f"of {list(ROLL_JUDGE_PROMPTS)}"
        )


@dataclass
class RewardWorkerConfig(WorkerConfig):
    """The settings of one reward worker: a domain's (`rewards.<domain>`) or one of its scorers'."""

    timeout: float = field_help(
        5.0,
        "per-sample grading time limit in seconds, honoured by workers that grade through "
        "RewardWorker.grade_rows (the built-in math and multiple-choice workers): a sample past it scores 0 "
        "and counts in reward/<domain>/timeouts",
        bounds="(0, inf)",
    )
    require_boxed: bool = field_help(
        False,
        "built-in math rule reward (MathRuleRewardWorker): true = grade only the answer in the response's last "
        "\\boxed{...} and score 0 a response without one (strict format); false = math-verify's lenient "
        "extraction, where a bare final answer also scores 1",
    )
    reward_args: dict[str, Any] = field_help(
        default_factory=dict, help="free-form settings for a custom reward worker (self.worker_config.reward_args)"
    )
    # Code rewards (roll.workers.rewards.code_sandbox; ROLL's use_local / code_url)
    use_local: bool = field_help(
        True, "code rewards: run the test cases in roll's kernel-isolated sandbox (true) or at code_url (false)"
    )
    code_url: str | None = field_help(
        None, "code rewards with use_local: false: a SandboxFusion-compatible /run_code endpoint (http://…/run_code)"
    )
    code_score: Literal["all_pass", "pass_rate"] = field_help(
        "all_pass", "code rewards: 1 only if every test case passes (ROLL's rule), or the fraction that pass"
    )
    code_case_timeout: float = field_help(5.0, "code rewards: wall-clock seconds per test case", bounds="(0, inf)")
    code_memory_mb: int = field_help(
        512, "code rewards: memory cap per test case run (whole sandbox)", bounds="[1, inf)"
    )
    code_parallel_cases: int = field_help(
        2, "code rewards: test cases of one sample run at once (sandboxes)", bounds="[1, inf)"
    )
    code_http_retries: int = field_help(
        3, "code rewards at code_url: attempts per test case (timeouts, HTTP errors)", bounds="[1, inf)"
    )
    allow_unsafe_local_sandbox: bool = field_help(
        False,
        "code rewards: where the kernel sandbox is unavailable, run model code in a plain child process "
        "anyway (NOT a security boundary); false refuses to start and says what is missing",
    )

    response_length_penalty_coef: float = field_help(
        0.0,
        "CrossThinkQA worker only: weight of its length reward (ROLL's key; -0.5 below 100 response tokens of "
        "padded width, 0 above 400, linear between; docs/rewards.md)",
        bounds="(-inf, inf)",
    )
    reward_type: Literal["loose", "soft", "strict"] | None = field_help(
        None,
        "CrossThinkQA worker: ROLL's grading table (docs/rewards.md): loose/soft/strict score a right or wrong letter "
        "with or without a \\boxed{} answer; null = roll's 1/0 letter match. Other workers do not read it (as in "
        "ROLL; a warning says so)",
    )
    judge_model_type: str = field_help(
        "inference",
        "LLM-judge worker: 'inference' = this role loads model_args and generates with strategy_args "
        "(hf_infer or vllm) on its device_mapping; 'api' = POST to judge_api_url (OpenAI chat completions)",
    )
    judge_prompt: str = field_help(
        "",
        "LLM-judge worker: the prompt template; {question}, {response} and {reference} are filled in per row "
        "(empty, or ROLL's name Qwen2.5-7B-Instruct-RLVR-prompt = the built-in yes/no template in "
        "roll/workers/rewards/llm_judge.py)",
    )
    judge_verdict: str = field_help(
        "yes_no",
        "LLM-judge worker: how the judge's reply is read: 'yes_no' (first YES/NO word: 1/0) or 'score' (last "
        "number in the reply divided by judge_score_max, clipped to [0, 1])",
    )
    judge_score_max: float = field_help(
        10.0, "LLM-judge worker, judge_verdict 'score': the judge's top score", bounds="(0, inf)"
    )
    judge_max_new_tokens: int = field_help(
        32, "LLM-judge worker: tokens the judge may write per verdict", bounds="[1, inf)"
    )
    judge_api_url: str | None = field_help(
        None, "LLM-judge worker, judge_model_type 'api': base URL of an OpenAI-compatible server (…/v1)"
    )
    judge_api_model: str = field_help("judge", "LLM-judge worker, 'api': the `model` field of each request")
    judge_api_key_env: str | None = field_help(
        None, "LLM-judge worker, 'api': name of the environment variable holding the bearer key (null = no key)"
    )
    judge_retries: int = field_help(
        2, "LLM-judge worker, 'api': extra attempts per request after a failure", bounds="[0, inf)"
    )
    judge_batch_size: int = field_help(
        8, "LLM-judge worker: verdicts requested at once (concurrent API calls)", bounds="[1, inf)"
    )


@dataclass
class ScorerConfig(RewardWorkerConfig):
    """One of several reward workers of a domain (docs/reward_domains_multi.md); a role of its own,
    `rewards.<domain>.<name>`, with every reward-worker setting of a domain."""

    name: str = field_help("", "required: the scorer's name (letters, digits, _), logged as reward/<domain>/<name>")
    weight: float = field_help(
        1.0, "the domain's reward is the sum over its scorers of weight × score", bounds="(-inf, inf)"
    )


@dataclass
class RewardConfig(RewardWorkerConfig):
    tag_included: list[str] = field_help(
        default_factory=list,
        help="data tags routed to this domain; as in ROLL a domain takes only the tags it lists, and a row whose "
        "tag no domain lists is refused (by --dry_run too); rows without a tag go to the only domain when there "
        "is one",
    )
    query_filter_config: RewardFilterConfig = field_help(
        default_factory=RewardFilterConfig,
        help="dynamic sampling: drop this domain's prompt groups whose rewards carry no signal before training "
        "(refill with is_use_additional_prompts)",
    )
    response_filter_config: RewardFilterConfig = field_help(
        default_factory=RewardFilterConfig,
        help="ROLL's per-response filter; ROLL applies none whatever its type, so only no_filter is accepted",
    )

    scorers: list[ScorerConfig] = field_help(
        default_factory=list,
        help="several reward workers on each sample, instead of this domain's worker_cls: a list of "
        "{name, worker_cls, weight, ...} (docs/reward_domains_multi.md); empty = the domain's own worker_cls",
    )

    def scorer_roles(self) -> dict:
        """role name → (scorer name or None, weight, its WorkerConfig): the domain's reward workers."""
        if not self.scorers:
            return {self.name: (None, 1.0, self)}
        if getattr(self, "_roles", None) is None:  # built once: the role checks fill in fields (world_size)
            self._roles = {}
            for scorer in self.scorers:  # the role's config carries the role's full name (logs, remote errors)
                role = f"{self.name}.{scorer.name}"
                self._roles[role] = (scorer.name, scorer.weight, dataclasses.replace(scorer, name=role))
        return self._roles

    def __post_init__(self):
        super().__post_init__()
        where = self.name or "rewards.<domain>"
        if self.scorers and self.worker_cls is not None:
            raise ConfigError(f"'{where}': set either worker_cls (one reward worker) or scorers (several), not both")
        seen = set()
        for index, scorer in enumerate(self.scorers):
            if not _SCORER_NAME.match(scorer.name):
                raise ConfigError(
                    f"'{where}.scorers[{index}].name' = {scorer.name!r}: required, letters, digits and _ only"
                )
            if scorer.name in seen:
                raise ConfigError(f"'{where}.scorers[{index}].name' = {scorer.name!r} is used twice in this domain")
            seen.add(scorer.name)
        self.query_filter_config.check(f"{self.name or 'rewards.<domain>'}.query_filter_config")
        for index, worker in [(None, self), *enumerate(self.scorers)]:
            _check_judge_prompt(where if index is None else f"{where}.scorers[{index}]", worker.judge_prompt)
        if self.reward_type is not None and self.worker_cls != CROSSTHINKQA_WORKER:
            logger.warning(
                "'%s.reward_type' = %r is read only by the CrossThinkQA worker (%s); this domain's worker ignores it, "
                "as ROLL's does",
                where,
                self.reward_type,
                CROSSTHINKQA_WORKER,
            )
        if self.response_filter_config.type != "no_filter" or self.response_filter_config.filter_args:
            raise ConfigError(
                f"'{self.name or 'rewards.<domain>'}.response_filter_config': only type no_filter without "
                f"filter_args is supported (ROLL's response filter keeps every response); filter whole prompt "
                f"groups with query_filter_config"
            )


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
        bounds="(-inf, inf)",
    )
