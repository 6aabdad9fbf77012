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
