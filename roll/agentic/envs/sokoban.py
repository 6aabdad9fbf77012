"""Sokoban with a small seeded generator: puzzles are made by playing backwards from the solved state,
so every puzzle is solvable within `search_depth` moves and none starts solved."""

import random

from roll.agentic.envs.base import BaseEnv, EnvStep, EpisodeCounter, check_positive_int, choice_pattern, parse_choice
from roll.agentic.envs.registry import register_env

ACTIONS = ("Left", "Down", "Right", "Up")
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
MAX_ATTEMPTS = 1000  # reverse-play retries before giving up on a seed (only tiny rooms get near this)


def generate(rng: random.Random, height: int, width: int, num_boxes: int, depth: int):
    """Returns (walls, targets, boxes, player); walls is a set of (row, col) incl. the border."""
    walls = {(r, c) for r in range(height) for c in range(width) if r in (0, height - 1) or c in (0, width - 1)}
    floor = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    for _ in range(MAX_ATTEMPTS):
        cells = rng.sample(floor, num_boxes + 1)
        targets, player = frozenset(cells[:-1]), cells[-1]
        boxes = set(targets)
        for _ in range(depth):
            # Reverse moves: a walk, or a pull of the box behind the player (the reverse of a push).
            options = []
            for dr, dc in MOVES.values():
                ahead = (player[0] + dr, player[1] + dc)
                if ahead in walls or ahead in boxes:
                    continue
                options.append((ahead, None))
                behind = (player[0] - dr, player[1] - dc)
                if behind in boxes:
                    options.append((ahead, behind))
            if not options:
                break
            ahead, pulled = rng.choice(options)
            if pulled is not None:
                boxes.remove(pulled)
                boxes.add(player)
            player = ahead
        if boxes != targets:
            return walls, targets, frozenset(boxes), player
    raise RuntimeError(
        f"sokoban: no unsolved puzzle after {MAX_ATTEMPTS} attempts for dim_room "
        f"{[height, width]} with num_boxes={num_boxes}, search_depth={depth}; enlarge the room"
    )


SYMBOLS = ("#", "_", "O", "V", "X", "P", "S")  # by ROLL's cell ids 0-6


@register_env("sokoban")
class SokobanEnv(BaseEnv):
    instructions = (
        "You are playing Sokoban. Push every box onto a target; you can push one box at a time and never pull.\n"
        "Legend: # wall, _ floor, O target, X box, V box on target, P you, S you on a target.\n"
        "Reply with one action: Left, Down, Right or Up (for example <answer>Up</answer>)."
    )
    action_pattern = choice_pattern(ACTIONS)
    default_config = {
        "dim_room": [6, 6],
        "num_boxes": 1,
        "search_depth": 5,
        "max_steps": 10,
        "step_penalty": 0.0,
        "box_on_target_reward": 0.0,
        "distance_shaping": 0.0,
        # ROLL's cell id → symbol: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 you, 6 you on target
        "grid_lookup": None,
        "grid_vocab": None,  # ROLL's symbol → meaning, shown as the legend
    }

    def __init__(self, **env_config):
        super().__init__(**env_config)
        dim = self.config["dim_room"]
        if (
            not isinstance(dim, (list, tuple))
            or len(dim) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 3 for d in dim)
        ):
            raise ValueError(
                f"sokoban: env_config 'dim_room' must be [height, width] with both >= 3 "
                f"(border walls included), got {dim!r}"
            )
        self.height, self.width = dim
        self.num_boxes = check_positive_int(self, "num_boxes")
        if self.num_boxes + 1 > (self.height - 2) * (self.width - 2):
            raise ValueError(
                f"sokoban: num_boxes={self.num_boxes} does not fit in dim_room {list(dim)} "
                f"({(self.height - 2) * (self.width - 2)} floor cells, one is the player's)"
            )
        self.depth = check_positive_int(self, "search_depth")
        self.max_steps = check_positive_int(self, "max_steps")
        for key in ("step_penalty", "box_on_target_reward", "distance_shaping"):
            if isinstance(self.config[key], bool) or not isinstance(self.config[key], (int, float)):
                raise ValueError(f"sokoban: env_config {key!r} must be a number, got {self.config[key]!r}")
        self.symbols = self._grid_lookup(self.config["grid_lookup"])
        vocab = self.config["grid_vocab"]
        if vocab is not None:
            if not isinstance(vocab, dict) or not all(isinstance(v, str) for v in vocab.values()):
                raise ValueError(f"sokoban: env_config 'grid_vocab' must map symbols to meanings, got {vocab!r}")
            legend = ", ".join(f"{symbol} {meaning}" for symbol, meaning in vocab.items())
            self.instructions = "\n".join(
                f"Legend: {legend}." if line.startswith("Legend:") else line for line in self.instructions.split("\n")
            )
        self.counter = EpisodeCounter(self.max_steps)
        self.walls = None

    @staticmethod
    def _grid_lookup(lookup) -> list[str]:
        """Symbols by ROLL's cell ids (see default_config); keys may be ints or their strings."""
        if lookup is None:
            return list(SYMBOLS)
        table = {int(k): v for k, v in lookup.items()} if isinstance(lookup, dict) else None
        if table is None or set(table) != set(range(7)) or not all(isinstance(v, str) and v for v in table.values()):
            raise ValueError(
                f"sokoban: env_config 'grid_lookup' must give a symbol for each cell id 0-6 (wall, floor, target, "
                f"box on target, box, player, player on target), got {lookup!r}"
            )
        return [table[i] for i in range(7)]

    def least_observation_tokens(self) -> int:
        return self.height * self.width  # the rendered grid shows every cell

    def reset(self, seed: int) -> str:
        self.walls, self.targets, boxes, self.player = generate(
            random.Random(seed), self.height, self.width, self.num_boxes, self.depth
        )
        self.boxes = set(boxes)
        self.counter.reset()
        return self.render()

    def render(self) -> str:
        rows = []
        for r in range(self.height):
            cells = []
            for c in range(self.width):
                cell, on_target = (r, c), (r, c) in self.targets
                if cell in self.walls:
                    kind = 0
                elif cell == self.player:
                    kind = 6 if on_target else 5
                elif cell in self.boxes:
                    kind = 3 if on_target else 4
                else:
                    kind = 2 if on_target else 1
                cells.append(self.symbols[kind])
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def box_distance(self) -> int:
        """Σ over boxes of the Manhattan distance to the nearest target. `distance_shaping` × its decrease is
        a potential-based shaping reward: it pays for progress without changing which policy is optimal."""
        return sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in self.targets) for b in self.boxes)

    def _move(self, choice: str) -> int:
        """Moves the player (pushing a box if one is ahead and free behind); returns the change in boxes on targets."""
        dr, dc = MOVES[choice]
        ahead = (self.player[0] + dr, self.player[1] + dc)
        if ahead in self.walls:
            return 0
        if ahead in self.boxes:
            beyond = (ahead[0] + dr, ahead[1] + dc)
            if beyond in self.walls or beyond in self.boxes:
                return 0
            self.boxes.remove(ahead)
            self.boxes.add(beyond)
            self.player = ahead
            return (beyond in self.targets) - (ahead in self.targets)
        self.player = ahead
        return 0

    def step(self, action: str) -> EnvStep:
        self.counter.tick("sokoban")
        choice = parse_choice(action, ACTIONS)
        if choice is None:
            done = self.counter.finish(False)
            return EnvStep(
                "Invalid action.\n" + self.render(),
                0.0,
                done,
                {"action_is_valid": False, "success": False, "steps": self.counter.steps},
            )
        distance = self.box_distance()
        delta = self._move(choice)
        success = self.boxes == self.targets
        reward = (
            -self.config["step_penalty"]
            + self.config["box_on_target_reward"] * delta
            + (1.0 if success else 0.0)
            + self.config["distance_shaping"] * (distance - self.box_distance())
        )
        done = self.counter.finish(success)
        return EnvStep(
            self.render(),
            float(reward),
            done,
            {"action_is_valid": True, "success": success, "steps": self.counter.steps},
        )
