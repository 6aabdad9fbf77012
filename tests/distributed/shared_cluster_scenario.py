"""Two runs on one four-node Ray cluster (issue 31), simulated on one machine with ray.cluster_utils; only
placement groups, no workers. Run by tests/distributed/test_shared_cluster.py in a subprocess of its own:

    python -m tests.distributed.shared_cluster_scenario RESULT.json

The first ResourceManager takes two nodes; the second must take the other two at once (it used to wait
behind the first while they idled); a third, with every device held, must say that it waits and for what.
"""

import json
import logging
import sys


def main(result_path: str) -> int:
    import ray
    from ray.cluster_utils import Cluster

    from roll.distributed.resource_manager import ResourceManager

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("roll.ray").addHandler(handler)
    result: dict = {}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"roll_device": 1}, "include_dashboard": False},
    )
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=0, resources={"roll_device": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        first = ResourceManager(num_nodes=2, num_gpus_per_node=1, timeout=60)
        second = ResourceManager(num_nodes=2, num_gpus_per_node=1, timeout=20)
        result["first"] = [n.node_id for n in first.nodes]
        result["second"] = [n.node_id for n in second.nodes]
        result["head"] = cluster.head_node.node_id
        try:
            ResourceManager(num_nodes=1, num_gpus_per_node=1, timeout=3)
        except TimeoutError as error:
            result["third_error"] = str(error)
        result["log"] = records
        first.shutdown()
        second.shutdown()
    finally:
        with open(result_path, "w") as file:
            json.dump(result, file)
        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
