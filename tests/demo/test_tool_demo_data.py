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
