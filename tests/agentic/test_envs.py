"""Environments and their registry: determinism, solvability, action parsing, limits, user envs."""

from collections import deque

import pytest

from roll.agentic.envs import BaseEnv, EnvStep, list_envs, make_env, register_env
from roll.agentic.envs.sokoban import MOVES

ACTIONS = ("Left", "Down", "Right", "Up")
DELTA = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}


def grid(observation: str):
    return [row.split(" ") for row in observation.splitlines() if not row.startswith("Invalid")]


def find(cells, symbols):
    return [(r, c) for r, row in enumerate(cells) for c, ch in enumerate(row) if ch in symbols]


# ---- frozen lake -----------------------------------------------------------------------------------------


def lake_path(observation: str):
    """BFS from P to G avoiding holes, on the rendered map only."""
    cells = grid(observation)
    start, goal = find(cells, "P")[0], find(cells, "G")[0]
    queue, seen = deque([(start, [])]), {start}
    while queue:
        (r, c), path = queue.popleft()
        if (r, c) == goal:
            return path
        for name, (dr, dc) in DELTA.items():
            nxt = (r + dr, c + dc)
            if (
                0 <= nxt[0] < len(cells)
                and 0 <= nxt[1] < len(cells[0])
                and nxt not in seen
                and cells[nxt[0]][nxt[1]] != "O"
            ):
                seen.add(nxt)
                queue.append((nxt, path + [name]))
    raise AssertionError(f"no path on\n{observation}")


def test_frozen_lake_rendering_and_determinism():
    env = make_env("frozen_lake", {"size": 4})
    first = env.reset(seed=3)
    cells = grid(first)
    assert len(cells) == 4 and all(len(row) == 4 for row in cells)
    assert set(ch for row in cells for ch in row) <= {"P", "_", "O", "G"}
    assert cells[0][0] == "P" and cells[3][3] == "G"
    assert make_env("frozen_lake", {"size": 4}).reset(seed=3) == first
    maps = {env.reset(seed=s) for s in range(20)}
    assert len(maps) >= 15  # different seeds give different maps (mostly)


@pytest.mark.parametrize("seed", range(8))
def test_frozen_lake_bfs_path_reaches_goal(seed):
    env = make_env("frozen_lake", {"size": 5, "max_steps": 30})
    observation = env.reset(seed)
    path = lake_path(observation)
    for i, action in enumerate(path):
        result = env.step(f"<answer>{action.lower()}</answer>" if i % 2 else f"  {action.upper()} ")
        assert result.info["action_is_valid"]
    assert result.done and result.reward == 1.0 and result.info["success"]
    assert "W" in result.observation and "G" not in result.observation


def test_frozen_lake_hole_ends_episode_without_reward():
    env = make_env("frozen_lake", {"size": 4, "p": 0.3})  # many holes
    for seed in range(50):
        cells = grid(env.reset(seed))
        hole = next(
            (
                (name, (r, c))
                for name, (r, c) in DELTA.items()
                if 0 <= r and 0 <= c and r < 4 and c < 4 and cells[r][c] == "O"
            ),
            None,
        )
        if hole:
            result = env.step(hole[0])
            assert result.done and result.reward == 0.0 and not result.info["success"]
            assert grid(result.observation)[hole[1][0]][hole[1][1]] == "X"
            return
    pytest.fail("no map with a hole next to the start")


@pytest.mark.parametrize("env_type", ["frozen_lake", "sokoban"])
def test_invalid_action_leaves_state_unchanged(env_type):
    env = make_env(env_type, {})
    start = env.reset(seed=1)
    for bad in ["left please", "<answer>Jump</answer>", "", "<answer>Left", "LeftRight"]:
        result = env.step(bad)
        assert not result.info["action_is_valid"] and not result.info["success"]
        assert result.reward == 0.0 and not result.done
        assert result.observation.startswith("Invalid action.") and result.observation.endswith(start)


@pytest.mark.parametrize("env_type", ["frozen_lake", "sokoban", "calculator"])
def test_max_steps_ends_episode(env_type):
    env = make_env(env_type, {"max_steps": 3})
    env.reset(seed=0)
    results = [env.step("nonsense") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not results[-1].info["success"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("Left")


# ---- sokoban ---------------------------------------------------------------------------------------------


def solve_sokoban(observation: str, max_depth: int = 30):
    """Plain BFS over (player, boxes) on the rendered map: returns the shortest action list."""
    cells = grid(observation)
    walls = set(find(cells, "#"))
    targets = frozenset(find(cells, "OVS"))
    boxes = frozenset(find(cells, "XV"))
    player = find(cells, "PS")[0]
    queue, seen = deque([(player, boxes, [])]), {(player, boxes)}
    while queue:
        player, boxes, path = queue.popleft()
        if boxes == targets:
            return path
        if len(path) >= max_depth:
            continue
        for name, (dr, dc) in MOVES.items():
            ahead = (player[0] + dr, player[1] + dc)
            new_boxes = boxes
            if ahead in walls:
                continue
            if ahead in boxes:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if beyond in walls or beyond in boxes:
                    continue
                new_boxes = (boxes - {ahead}) | {beyond}
            if (ahead, new_boxes) not in seen:
                seen.add((ahead, new_boxes))
                queue.append((ahead, new_boxes, path + [name]))
    return None


@pytest.mark.parametrize("config", [{}, {"dim_room": [7, 7], "num_boxes": 2, "search_depth": 8}])
def test_sokoban_generated_puzzles_are_solvable_and_unsolved(config):
    env = make_env("sokoban", {**config, "max_steps": 40})
    for seed in range(10):
        observation = env.reset(seed)
        cells = grid(observation)
        assert len(find(cells, "XV")) == config.get("num_boxes", 1) and find(cells, "X"), observation
        path = solve_sokoban(observation)
        assert path, f"seed {seed} unsolvable:\n{observation}"
        assert len(path) <= env.depth  # reverse play of search_depth moves bounds the solution length
        for action in path:
            result = env.step(action)
        assert result.done and result.reward == 1.0 and result.info["success"]
        assert not find(grid(result.observation), "X")


def test_sokoban_determinism_and_variety():
    env = make_env("sokoban", {})
    assert env.reset(5) == make_env("sokoban", {}).reset(5)
    assert len({env.reset(s) for s in range(20)}) >= 15


def test_sokoban_push_rules():
    env = make_env("sokoban", {"dim_room": [6, 6], "num_boxes": 2})
    env.reset(seed=0)
    # Hand-placed state: boxes at (1,2) and (2,2), targets elsewhere, player right of the top box.
    env.targets, env.boxes, env.player = frozenset({(4, 4), (4, 3)}), {(1, 2), (2, 2)}, (1, 3)
    assert grid(env.step("Left").observation)[1][:4] == ["#", "X", "P", "_"]  # pushed
    assert grid(env.step("Left").observation)[1][:4] == ["#", "X", "P", "_"]  # box against wall: no move
    env.boxes, env.player = {(1, 1), (2, 1)}, (3, 1)
    assert grid(env.step("Up").observation)[3][1] == "P" and env.boxes == {(1, 1), (2, 1)}  # box behind box
    assert env.step("Right").observation.splitlines()[3] == "# _ P _ _ #"  # plain walk


def test_sokoban_shaping_rewards():
    env = make_env("sokoban", {"box_on_target_reward": 0.5, "step_penalty": 0.1, "max_steps": 40})
    for seed in range(30):
        path = solve_sokoban(env.reset(seed))
        if len(path) >= 2:
            break
    rewards = [env.step(a).reward for a in path]
    assert rewards[:-1] == [pytest.approx(-0.1)] * (len(path) - 1)  # one box: only the last push lands it
    assert rewards[-1] == pytest.approx(-0.1 + 0.5 + 1.0)


def test_sokoban_distance_shaping_sums_to_the_distance_covered():
    """Potential-based: an optimal solution earns shaping × (initial box-target distance) plus the success
    reward; a push away from the target costs what a push back returns."""
    env = make_env("sokoban", {"distance_shaping": 0.25, "max_steps": 40})
    path = solve_sokoban(env.reset(3))
    start = env.box_distance()
    rewards = [env.step(a).reward for a in path]
    assert start > 0 and sum(rewards) == pytest.approx(1.0 + 0.25 * start)
    env.reset(3)
    before = env.box_distance()
    for action in ("Left", "Right", "Up", "Down", "Left", "Right"):  # wander: shaping only ever tracks distance
        total = env.step(action).reward
        assert total == pytest.approx(0.25 * (before - env.box_distance())) or env.boxes == env.targets
        before = env.box_distance()
        if env.boxes == env.targets:
            break


def test_sokoban_rejects_room_too_small():
    with pytest.raises(ValueError, match="num_boxes"):
        make_env("sokoban", {"dim_room": [4, 4], "num_boxes": 4})
    with pytest.raises(ValueError, match="dim_room"):
        make_env("sokoban", {"dim_room": 6})


# ---- calculator (tool use through the sandbox) -------------------------------------------------------------


def test_calculator_tool_call_and_answers():
    env = make_env("calculator", {"max_operand": 20, "num_operations": 2})
    question = env.reset(seed=7)
    assert question == make_env("calculator", {"max_operand": 20, "num_operations": 2}).reset(seed=7)
    expression = question.removeprefix("What is ").removesuffix("?")
    result = env.step(f"<python>print({expression})</python>")
    assert result.info == {"action_is_valid": True, "success": False, "tool_call": True, "steps": 1}
    assert not result.done and result.reward == 0.0
    answer = int(result.observation)  # the sandbox really ran the code
    assert answer == env.answer
    error = env.step("<python>1/0</python>")
    assert error.observation == "ZeroDivisionError: division by zero" and not error.done
    final = env.step(f"<answer> {answer} </answer>")
    assert final.done and final.reward == 1.0 and final.info["success"]

    env.reset(seed=7)
    wrong = env.step(f"<answer>{answer + 1}</answer>")
    assert wrong.done and wrong.reward == 0.0 and not wrong.info["success"]


def test_calculator_tool_timeout_and_invalid_reply():
    env = make_env("calculator", {"tool_timeout": 0.5})
    env.reset(seed=0)
    assert env.step("<python>while True: pass</python>").observation == "timeout"
    invalid = env.step("the answer is 5")
    assert not invalid.info["action_is_valid"] and not invalid.done and invalid.reward == 0.0
    assert not env.step("<answer>five</answer>").info["action_is_valid"]


# ---- registry and config ----------------------------------------------------------------------------------


def test_registry_lists_shipped_envs_and_rejects_duplicates():
    assert {"frozen_lake", "sokoban", "calculator"} <= set(list_envs())
    with pytest.raises(ValueError, match="already registered"):

        @register_env("sokoban")
        class Again(BaseEnv):  # noqa: F841
            def reset(self, seed):
                return ""

            def step(self, action):
                return EnvStep("", 0.0, True, {})


def test_unknown_env_name_lists_registered_and_explains_dotted_paths():
    with pytest.raises(ValueError) as error:
        make_env("frozenlake", {})
    assert "frozen_lake" in str(error.value) and "dotted path" in str(error.value)


def test_user_env_from_dotted_path():
    env = make_env("tests.agentic.user_env_module.CountdownEnv", {"start": 1})
    assert env.reset(seed=0) == "1"
    assert env.step("wait").observation == "0"
    assert env.step("go").info["success"]
    with pytest.raises(TypeError, match="not a subclass"):
        make_env("tests.agentic.user_env_module.NotAnEnv", {})
    with pytest.raises(ImportError, match="no 'Missing'"):
        make_env("tests.agentic.user_env_module.Missing", {})


@pytest.mark.parametrize(
    "env_type", ["frozen_lake", "sokoban", "calculator", "tests.agentic.user_env_module.CountdownEnv"]
)
def test_unknown_env_config_key_names_key_and_valid_keys(env_type):
    with pytest.raises(ValueError, match=r"unknown env_config key\(s\) \['sizee'\]; valid keys: \["):
        make_env(env_type, {"sizee": 4})


def test_invalid_env_config_values():
    with pytest.raises(ValueError, match="'p'"):
        make_env("frozen_lake", {"p": 0})
    with pytest.raises(ValueError, match="'max_steps'"):
        make_env("frozen_lake", {"max_steps": 0})
    with pytest.raises(ValueError, match="'tool_timeout'"):
        make_env("calculator", {"tool_timeout": -1})


def test_slippery_frozen_lake_is_deterministic_per_seed():
    def trajectory(seed):
        env = make_env("frozen_lake", {"is_slippery": True, "max_steps": 10})
        states = [env.reset(seed)]
        for action in ["Right", "Down"] * 5:
            result = env.step(action)
            states.append(result.observation)
            if result.done:
                break
        return states

    assert trajectory(4) == trajectory(4)
    assert len({tuple(trajectory(s)) for s in range(10)}) > 1  # the slip RNG does something
