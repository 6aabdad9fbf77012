"""The RLVR data checks `--dry_run` runs on the files as they are (no tokenizer, no Ray), and the start-up
runs again on the loaded rows (roll.data.checks): ground truths a domain grades against, and enough prompts
for one step."""

from roll.data.checks import check_ground_truths, check_prompts_per_step
from roll.data.prompts import prompt_sampler, read_columns, row_truth
from roll.pipeline.rlvr.routing import build_tag_routes, route
from roll.utils.import_utils import import_class


def ground_truth_readers(reward) -> list[str]:
    """The worker classes of a reward domain that grade against a ground truth (RewardWorker.needs_ground_truth)."""
    names = []
    for _, _, worker in reward.scorer_roles().values():
        try:
            cls = import_class(worker.worker_cls)
        except (ImportError, ValueError):  # the start-up checks name a class that does not import
            continue
        if getattr(cls, "needs_ground_truth", False):
            names.append(cls.__name__)
    return names


def check_data_files(config) -> None:
    """The training and validation files' ground truths, and the training file's prompts per step, checked
    as `RLVRPipeline` checks its loaded rows (files that cannot be read are left to the start-up checks)."""
    routes, domains = build_tag_routes(config.rewards), list(config.rewards)
    graders = {domain: ground_truth_readers(reward) for domain, reward in config.rewards.items()}
    blocks = [("actor_train.data_args", config.actor_train.data_args)]
    if config.validation is not None:
        blocks.append(("validation.data_args", config.validation.data_args))
    for key, data_args in blocks:
        files = [data_args.file_name] if isinstance(data_args.file_name, str) else list(data_args.file_name)
        rows = []
        wanted = [data_args.tag_key, data_args.ground_truth_key, "test_cases", "case_type"]
        prompts = [data_args.prompt_key, data_args.messages_key]
        for source, name in enumerate(files):
            columns = read_columns(name, wanted + prompts)
            if columns is None or all(v is None for key in prompts for v in columns.pop(key)):
                return  # unreadable, or no prompt at all (a CSV without header): the row loader names it
            for index, values in enumerate(zip(*columns.values())):
                row = dict(zip(wanted, values))
                where = f"{key} {name} row {index}"
                _, defect = row_truth(row, data_args, where)
                domain = route(row[data_args.tag_key], routes, domains, where)
                rows.append({"source": source, "index": index, "domain": domain, "truth_defect": defect})
        check_ground_truths(rows, files, graders, data_args.ground_truth_key, key)
        if key == "actor_train.data_args" and not config.allow_repeated_prompts_in_step:  # the start-up warns
            sampler = prompt_sampler(rows, data_args, config.seed)
            check_prompts_per_step(
                sampler.shortfalls(config.rollout_batch_size),
                config.rollout_batch_size,
                False,
                f"{key}.file_name",
            )
