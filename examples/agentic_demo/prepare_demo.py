"""Build the agentic demo's tiny model: a tokenizer from the environments' texts, then a warm start on
random play (the reply format, then the environments' dynamics; see roll/demo/agentic.py).

    python examples/agentic_demo/prepare_demo.py --output_dir agentic_demo_data   # ~4 min on 2 CPU cores
"""

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo.agentic import prepare_agentic_demo  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="agentic_demo_data")
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    print(json.dumps(prepare_agentic_demo(args.output_dir, force=args.force), indent=1))
