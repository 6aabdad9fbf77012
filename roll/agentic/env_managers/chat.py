"""Token-in-token-out chat bookkeeping for multi-turn rollouts.

A trajectory is built from the exact token ids the engine generated, joined by the tokenised
observations between them. Decoded text is never re-tokenised into the trajectory: byte-level BPE
does not round-trip (the model may emit "Le"+"ft" where the tokenizer would write "Left"), so
re-tokenising would train on tokens the policy never produced.

Observation tokens come from the tokenizer's own chat template: the text the template puts after a
finished assistant turn and before the next assistant turn (e.g. `<|user|>...<|assistant|>`), tool results
included (`continuation_ids`). What a template writes after the end-of-turn token the model generated (Qwen's
newline after `<|im_end|>`) is context too.
"""

from dataclasses import dataclass, field

from roll.data.chat_template import render_chat
from roll.utils.errors import InputError


class ChatTokens:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        self._turn_prefix = self._render(probe, generation_prompt=False)
        full = self._render(probe + [{"role": "user", "content": "OBSERVATION"}], generation_prompt=True)
        if not full.startswith(self._turn_prefix):
            raise InputError(
                "the tokenizer's chat template renders a conversation differently once a turn is "
                "added; multi-turn token-in-token-out needs a template that only appends"
            )

    def _render(self, messages: list[dict], generation_prompt: bool, tools: list[dict] | None = None) -> str:
        extra = {"tools": tools} if tools else {}
        return render_chat(self.tokenizer, messages, add_generation_prompt=generation_prompt, **extra)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, user_text: str, system: str | None = None, tools: list[dict] | None = None) -> list[int]:
        """An optional system message, a first user turn, then the assistant generation prompt; `tools` (function
        schemas) are rendered by the template's own tools section."""
        messages = [{"role": "system", "content": system}] if system else []
        text = self._render([*messages, {"role": "user", "content": user_text}], generation_prompt=True, tools=tools)
        if system and system not in text:
            raise InputError(
                "the tokenizer's chat template drops system messages, so agent_system_template would never reach "
                "the model; remove it or use a template with a system role"
            )
        return self.encode(text)

    def observation_ids(self, observation: str) -> list[int]:
        """The tokens between a finished assistant reply and the next reply: next user turn + generation prompt."""
        return self.continuation_ids([{"role": "user", "content": observation}])

    def continuation_ids(
        self, messages: list[dict], reply: dict | None = None, tools: list[dict] | None = None
    ) -> list[int]:
        """The tokens between a finished reply (its end-of-turn token included) and the next reply: `messages`
        (a user turn, tool results) and the generation prompt, as the template renders them after `reply` (an
        assistant message; default a plain one)."""
        probe = [{"role": "user", "content": "u"}, reply or {"role": "assistant", "content": "a"}]
        before = self._render(probe, generation_prompt=False, tools=tools)
        after = self._render(probe + list(messages), generation_prompt=True, tools=tools)
        if not after.startswith(before):
            raise InputError(
                f"the tokenizer's chat template renders a conversation differently once {[m['role'] for m in messages]}"
                " messages follow a reply; multi-turn token-in-token-out needs a template that only appends"
            )
        # the rendered reply ends with the end-of-turn token the engine generated; what follows it is context
        eos = self.tokenizer.eos_token or ""
        tail = before[before.rfind(eos) + len(eos) :] if eos and eos in before else ""
        return self.encode(tail + after[len(before) :])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


@dataclass
class TokenTrajectory:
    """prompt ids, then a response stream where `mask` is 1 exactly on the tokens the model generated."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)

    def add_generated(self, ids: list[int], log_probs: list[float], eos_token_id: int | None) -> None:
        """`eos_token_id` None: the reply goes on after these ids (the tir manager inserts a tool's output)."""
        self.response_ids += ids
        self.mask += [1] * len(ids)
        self.log_probs += list(log_probs)
        if eos_token_id is not None and (not ids or ids[-1] != eos_token_id):
            # a reply cut at max_tokens_per_step: close the turn as the template would; not trained
            self.add_context([eos_token_id])

    def add_context(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)

    @property
    def context_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids
