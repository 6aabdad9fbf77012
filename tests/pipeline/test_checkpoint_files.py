import pytest

from roll.utils import checkpoint


def test_commit_is_atomic_and_latest_points_to_newest(tmp_path):
    out = str(tmp_path)
    assert checkpoint.find_checkpoint(out, True) is None
    staged = checkpoint.staging_dir(out, 3)
    (staged / "a.txt").write_text("x")
    # an interrupted save of step 5 leaves only a .tmp directory: resume must ignore it
    checkpoint.staging_dir(out, 5)
    checkpoint.commit(out, 3)
    assert checkpoint.find_checkpoint(out, True).name == "step-3"
    assert checkpoint.find_checkpoint(out, False) is None
    assert (checkpoint.find_checkpoint(out, True) / "a.txt").read_text() == "x"


def test_saving_a_step_again_replaces_it_and_a_dangling_latest_is_an_error(tmp_path):
    out = str(tmp_path)
    for content in ("old", "new"):  # a run restarted from an earlier checkpoint saves step 2 again
        (checkpoint.staging_dir(out, 2) / "a.txt").write_text(content)
        checkpoint.commit(out, 2)
    root = checkpoint.checkpoint_root(out)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2"]
    assert (checkpoint.find_checkpoint(out, True) / "a.txt").read_text() == "new"
    (root / "latest").write_text("step-9\n")
    with pytest.raises(FileNotFoundError, match="step-9, which does not exist"):
        checkpoint.find_checkpoint(out, True)
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        checkpoint.find_checkpoint(out, str(root / "step-7"))
