"""A two-node Ray cluster on one machine, and the tiny demo attached to it through RAY_ADDRESS.

Run by tests/pipeline/test_ray_cluster.py in a subprocess of its own (Ray must not be initialised in the
driver before the attach, and the cluster must not outlive the scenario):

    python -m tests.pipeline.ray_cluster_scenario --demo_dir D --node_dir N --result R.json

The nodes are ray.cluster_utils.Cluster nodes: separate raylets and object stores, each with its own
`roll_device` resource and CPUs, started from another directory than the driver's (as `ray start` on
another machine would be). One cluster serves two scenarios in turn (a cluster start costs ~15 s):
`lacking`: the second node has no device; the pipeline must fail before any worker starts (result["lacking"]).
Then that node is replaced by one with a device, and `two_nodes`: the demo runs 3 steps with actor_train (and
the reference) on device 0 = node 0 and actor_infer on device 1 = node 1, and saves a checkpoint under a
relative output_dir. The result file holds what the tests assert on.
"""

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def cluster_overrides(max_steps: int) -> list[str]:
    return [
        "num_nodes=2",
        "num_gpus_per_node=1",
        "actor_train.device_mapping=[0]",
        "reference.device_mapping=[0]",
        "actor_infer.device_mapping=[1]",
        f"max_steps={max_steps}",
        f"save_steps={max_steps}",
    ]


def start_cluster(node_dir: Path):
    """Head (the driver's node, one device) + a worker node without devices, each a raylet of its own, started
    from `node_dir`."""
    from ray.cluster_utils import Cluster

    previous = os.getcwd()
    os.chdir(node_dir)  # workers start where their raylet did, as with `ray start` run elsewhere
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "resources": {"roll_device": 1}, "include_dashboard": False},
        )
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    finally:
        os.chdir(previous)
    return cluster


def give_the_worker_node_a_device(cluster, node_dir: Path) -> None:
    previous = os.getcwd()
    os.chdir(node_dir)
    try:
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node)
        cluster.add_node(num_cpus=1, resources={"roll_device": 1})
        cluster.wait_for_nodes()
    finally:
        os.chdir(previous)


def nodes(cluster) -> dict:
    return {"head": cluster.head_node.node_id, "worker": [n.node_id for n in cluster.worker_nodes]}


def worker_facts(pipeline) -> list[dict]:
    """Where each worker imports roll from and which directory it runs in."""
    import ray

    def facts(worker):
        import roll

        return {"role": worker.worker_name, "rank": worker.rank, "roll": roll.__file__, "cwd": os.getcwd()}

    refs = [w.__ray_call__.remote(facts) for cluster in pipeline.clusters.values() for w in cluster.workers]
    return ray.get(refs, timeout=60)


def run_two_nodes(demo_dir: Path, result: dict) -> None:
    from roll.pipeline.rlvr.pipeline import RLVRPipeline
    from tests.pipeline.helpers import make_config

    config = make_config(demo_dir, "output", cluster_overrides(3))  # relative: the driver's directory
    with RLVRPipeline(config) as pipeline:
        history = pipeline.run()
        result["placements"] = [{**row, "devices": list(row["devices"])} for row in pipeline.placements]
        result["workers"] = worker_facts(pipeline)
        result["weight_sync_method"] = pipeline.ppo.weight_sync.method
        result["group_members"] = pipeline.ppo.weight_sync.group_members
    result["steps"] = {
        str(step): {k: v for k, v in metrics.items() if k.startswith("weight_sync/")}
        for step, metrics in history["steps"].items()
    }
    result["checkpoint"] = sorted(str(p) for p in Path("output", "checkpoints").glob("step-*/*"))


def run_lacking(demo_dir: Path, result: dict) -> None:
    import roll.pipeline.base as base
    from roll.pipeline.rlvr.pipeline import RLVRPipeline
    from tests.pipeline.helpers import make_config

    started = []
    original = base.Cluster.__init__

    def counting_init(self, name, *args, **kwargs):  # a worker starts only through Cluster
        started.append(name)
        original(self, name, *args, **kwargs)

    base.Cluster.__init__ = counting_init
    config = make_config(demo_dir, "output", cluster_overrides(1))
    try:
        RLVRPipeline(config)
    except Exception as error:  # the expected outcome
        result["error_type"] = type(error).__name__
        result["error"] = str(error)
    finally:
        base.Cluster.__init__ = original
    result["clusters_started"] = started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo_dir", type=Path, required=True)
    parser.add_argument("--node_dir", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)

    import ray

    result: dict = {"driver_cwd": os.getcwd()}
    cluster = None
    previous_address = os.environ.get("RAY_ADDRESS")
    try:
        cluster = start_cluster(args.node_dir)
        os.environ["RAY_ADDRESS"] = cluster.address  # what a user exports after `ray start --head`
        lacking = result["lacking"] = {"nodes": nodes(cluster)}
        run_lacking(args.demo_dir, lacking)
        ray.init(address=cluster.address)  # look again: nothing may have been reserved
        lacking["placement_groups_after"] = len(ray.util.placement_group_table())
        ray.shutdown()
        give_the_worker_node_a_device(cluster, args.node_dir)
        result["nodes"] = nodes(cluster)
        run_two_nodes(args.demo_dir, result)
    except BaseException:
        result["crash"] = traceback.format_exc()
        raise
    finally:
        if previous_address is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = previous_address
        args.result.write_text(json.dumps(result, indent=1, default=str))
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
