from types import SimpleNamespace

import pytest
import torch

from roll.pipeline.rlvr.routing import build_tag_routes, route
from roll.utils.functional import scores_on_last_token


def test_routes_and_untagged_rows():
    routes = build_tag_routes(
        {"math": SimpleNamespace(tag_included=["gsm", "arith"]), "code": SimpleNamespace(tag_included=["py"])}
    )
    assert routes == {"gsm": "math", "arith": "math", "py": "code"}
    assert route("py", routes, ["math", "code"], "row 0") == "code"
    assert route(None, {}, ["math"], "row 0") == "math"
    with pytest.raises(ValueError, match="several reward domains"):
        route(None, routes, ["math", "code"], "train.jsonl row 3")
    with pytest.raises(ValueError, match=r"row 7: tag 'sql' is in no rewards"):
        route("sql", routes, ["math", "code"], "train.jsonl row 7")


def test_tag_claimed_twice_is_an_error():
    with pytest.raises(ValueError, match="already routed"):
        build_tag_routes({"a": SimpleNamespace(tag_included=["x"]), "b": SimpleNamespace(tag_included=["x"])})


def test_scores_land_on_last_response_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    out = scores_on_last_token(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0, 0, 1, 0], [2, 0, 0, 0], [0, 0, 0, 3]]
