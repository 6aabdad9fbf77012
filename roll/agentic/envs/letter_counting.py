"""Letter counting under GEM's id `rg:letter_counting` (reasoning-gym's task, served by GEM 0.0.4's
ReasoningGymEnv; ROLL's examples/qwen3_agentic_gem): one question, one reply, rules in roll's own words.

The question asks how often a letter occurs in a span of 5 to 15 consecutive words of a text; the reply's last
\\boxed{...} is the answer. Reward (reasoning-gym's scoring): 1.0 for exactly the count, len(count)/len(answer)
when the count appears inside a longer answer, else 0. The text is roll's own (below), not reasoning-gym's book,
so the questions differ from GEM's; which question a seed gets follows GEM's rule (see reset).
"""

import random
import re

from roll.agentic.envs.base import BaseEnv, EnvStep, check_positive_int
from roll.agentic.envs.registry import register_env
from roll.utils.math_grader import last_boxed

MIN_WORDS, MAX_WORDS = 5, 15  # reasoning-gym's defaults; GEM's env does not pass others

# Written for roll: a few plain paragraphs whose words the spans are cut from (any text of letters would do).
TEXT = """
The old lighthouse keeper woke before dawn every morning and climbed the spiral stairs to polish the great lamp
Fishing boats left the harbour in a long quiet line while gulls circled above the masts and called to each other
By noon the market square was crowded with farmers selling apples cheese bread and jars of dark honey
Children chased a brown dog between the stalls until a baker gave them warm rolls and told them to sit still
In the afternoon a sudden storm rolled in from the west and rain hammered the slate roofs of the village
The keeper watched the waves grow taller and lit the lamp early so that every ship could find its way home
When the wind finally dropped the sky turned pink and orange and the wet streets shone like polished glass
Families gathered in small kitchens to share soup and stories about storms their grandparents had survived
Late at night only the beam of the lighthouse moved sweeping slowly across the black water until morning came
A young teacher walked up the hill with a basket of books hoping to open a library in the empty chapel
She painted the shelves blue wrote careful labels for every box and invited the whole village to borrow freely
Within a month the chapel was full of readers of every age and the keeper came each week for a new novel
"""
WORDS = tuple(re.findall(r"[A-Za-z]+", TEXT))
END_OF_EPISODE = "The episode is over."


@register_env("rg:letter_counting")
class LetterCountingEnv(BaseEnv):
    # GEM's registration of rg:<name>: a virtual dataset of `size` questions generated from `seed`
    default_config = {"size": 500, "seed": 42}

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.size = check_positive_int(self, "size")
        self.dataset_seed = check_positive_int(self, "seed", minimum=0)
        self.count = None

    def question(self, index: int) -> tuple[str, str]:
        """Question `index` of the dataset and its answer, both a function of (seed, index) only."""
        rng = random.Random(self.dataset_seed + index)
        length = rng.randint(MIN_WORDS, MAX_WORDS)
        start = rng.randint(0, len(WORDS) - length)
        span = WORDS[start : start + length]
        letter = rng.choice(sorted(set("".join(span).lower())))
        count = sum(word.lower().count(letter) for word in span)
        return f'In the text "{" ".join(span)}", how many times does the letter "{letter}" occur?', str(count)

    def reset(self, seed: int) -> str:
        # GEM seeds Python's generator with the reset seed and picks a random dataset entry: the same index
        index = random.Random(seed).choice(range(self.size))
        text, self.count = self.question(index)
        return text

    def step(self, action: str) -> EnvStep:
        if self.count is None:
            raise RuntimeError("rg:letter_counting: step() called on a finished episode; call reset(seed) first")
        answer, count, self.count = last_boxed(action), self.count, None
        reward = 0.0
        if answer == count:
            reward = 1.0
        elif answer and count in answer:  # partial credit: the count inside a longer answer
            reward = len(count) / len(answer)
        info = {"action_is_valid": answer is not None, "success": reward == 1.0, "count": count}
        return EnvStep(END_OF_EPISODE, reward, True, info)
