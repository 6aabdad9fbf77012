"""benchmarks/vs_trl.py's summary: medians over the seeds and the ratios roll / TRL, thread-matched and at each
side's best setting (issue 33 item 7). Made-up run results; no run starts."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_trl.py"


def vs_trl():
    spec = importlib.util.spec_from_file_location("vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(s_per_step: float, process: float, in_process: float, final: float) -> dict:
    return {
        "step_seconds": [s_per_step * 2, s_per_step, s_per_step],  # median = s_per_step
        "process_startup": process,
        "startup": in_process,
        "curve": {0: 0.0, 10: final},
    }


def test_table_has_every_setting_and_the_matched_and_best_ratios():
    bench = vs_trl()
    runs = {  # two seeds each; roll is fastest at 2 threads, TRL at 1
        ("roll", 1): [run(0.6, 12.0, 8.0, 0.5), run(0.8, 14.0, 9.0, 0.6)],
        ("roll", 2): [run(0.4, 12.0, 8.0, 0.5), run(0.4, 13.0, 9.0, 0.5)],
        ("TRL", 1): [run(0.5, 6.0, 0.5, 0.7), run(0.5, 6.0, 0.5, 0.7)],
        ("TRL", 2): [run(0.8, 6.0, 0.5, 0.7), run(1.0, 6.0, 0.5, 0.7)],
    }
    summary = bench.summarize(runs)
    assert summary[("roll", 1)]["s_per_step"] == 0.7 and summary[("roll", 1)]["process"] == 13.0
    text = bench.table(summary, [1, 2])
    assert "| roll, 1 | 0.700 | 0.600 / 0.800 | 13.0 s | 8.5 s | 0.50 / 0.60 |" in text
    assert "| 1 thread(s) each | 1.40 | 2.17 | 17.00 |" in text  # 0.7 / 0.5, 13 / 6, 8.5 / 0.5
    assert "| 2 thread(s) each | 0.44 |" in text  # 0.4 / 0.9
    assert "| each at its best (roll 2, TRL 1) | 0.80 | 2.08 | 17.00 |" in text  # 0.4 / 0.5, 12.5 / 6


def test_roll_auto_setting_is_a_row_and_can_be_roll_best():
    """roll's shipped per-phase threads ("auto", key 0) next to the pinned settings."""
    bench = vs_trl()
    runs = {
        ("roll", 0): [run(0.3, 11.0, 7.0, 0.5)],
        ("roll", 1): [run(0.6, 12.0, 8.0, 0.5)],
        ("roll", 2): [run(0.5, 12.0, 8.0, 0.5)],
        ("TRL", 1): [run(0.5, 6.0, 0.5, 0.7)],
        ("TRL", 2): [run(0.6, 6.0, 0.5, 0.7)],
    }
    text = bench.table(bench.summarize(runs), [1, 2])
    assert "| roll, auto | 0.300 |" in text
    assert "| roll auto, TRL 1 | 0.60 |" in text  # 0.3 / 0.5
    assert "| each at its best (roll auto, TRL 1) | 0.60 |" in text
