"""The tool-calling demo's warm-start data is random play: it teaches how a calculator call is written and how its
result is used, never that calling is the better choice, and never the sums themselves."""

import random

from roll.agentic.tool_calls import parse_tool_calls
from roll.demo.tool_calling import ToolDemoSettings, random_play


def test_the_choice_to_call_is_a_coin_flip_and_guesses_are_guesses():
    settings = ToolDemoSettings(conversations=2000)
    data = random_play(settings, random.Random(0))
    offered = [c for c in data if c["tools"]]
    assert abs(len(offered) / len(data) - (1 - settings.no_tool_share)) < 0.04
    called, guessed_right, guesses = 0, 0, 0
    for conversation in data:
        messages = conversation["messages"]
        question = messages[1]["content"]
        expression = question.removeprefix("What is ").removesuffix("?")
        value = sum(int(x) for x in expression.split(" + "))
        replies = [m for m in messages if m["role"] == "assistant"]
        answer = int(replies[-1]["content"].removeprefix("<answer>").removesuffix("</answer>"))
        if len(replies) == 2:  # a call, then the answer
            assert conversation["tools"] is not None
            (call,) = parse_tool_calls(replies[0]["content"]).calls
            assert call.name == "calculator" and call.arguments == {"expression": expression}
            assert messages[3] == {"role": "tool", "content": str(value), "name": "calculator"}
            assert answer == value  # the result is used as it came back
            called += 1
        else:
            guesses += 1
            guessed_right += answer == value
    assert abs(called / len(offered) - 0.5) < 0.05  # nothing says calling is better
    assert guessed_right / guesses < 0.01  # made-up numbers: the data does not teach the sums


def test_format_drills_call_and_copy_and_leave_the_choice_untrained():
    """The drills teach how a call is written and how its result is used; the reply's first token (`<tool_call>`
    here, `<answer` when guessing: the choice) is not trained, so they do not teach that calling is better."""
    from roll.agentic.envs.tools.calculator import FUNCTION as CALCULATOR
    from roll.demo.tiny_model import build_tool_tokenizer
    from roll.demo.tool_calling import format_drills
    from roll.demo.warm_start import _encode

    drills = format_drills(ToolDemoSettings(format_drills=20))
    assert all(d["train_first_token"] is False and d["tools"] == [CALCULATOR] for d in drills)
    texts = [m["content"] for d in drills for m in d["messages"]]
    tokenizer = build_tool_tokenizer(texts, [CALCULATOR])
    for drill in drills[:3]:
        messages = drill["messages"]
        assert messages[3]["content"] == messages[4]["content"].removeprefix("<answer>").removesuffix("</answer>")
        ids, trained = _encode(tokenizer, drill, assistant_only=True)
        prompt = tokenizer.apply_chat_template(
            messages[:2], tools=drill["tools"], add_generation_prompt=True, tokenize=False
        )
        first = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        _, trained_all = _encode(tokenizer, dict(drill, train_first_token=True), assistant_only=True)
        assert trained_all[first] and not trained[first] and tokenizer.decode(ids[first]) == "<tool_call>"
        assert [i for i, (a, b) in enumerate(zip(trained, trained_all)) if a != b] == [first]  # only that token
