"""Build the tool-calling demo's tiny model: Qwen2.5's tool-calling chat layout, a tokenizer from the demo's
conversations, and a warm start on random play and format drills (when to call the calculator is left to RL; see
roll/demo/tool_calling.py).

    python examples/tool_demo/prepare_demo.py --output_dir tool_demo_data   # a few minutes on 2 CPU cores
    python examples/start_agentic_pipeline.py --config_path tool_demo --config_name calculator_native
"""

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo.tool_calling import prepare_tool_demo  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="tool_demo_data")
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    print(json.dumps(prepare_tool_demo(args.output_dir, force=args.force), indent=1))
