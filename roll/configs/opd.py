"""On-policy distillation (OPD) settings the policy-optimisation kinds share (RLVR, agentic, and the pure OPD kind
built on them): the teachers, their role names and routing, and the rules (docs/algorithms.md §13.5).

ROLL's keys and meanings: `use_opd` (mixed: A = A_RL − Σ_n c_n·KL_n, then whitening / mask / clip), `teacher` (one
role, or a mapping name → role), per teacher `opd_kl_coef` (c_n; null = 1.0) and `tag_included` (the tags routed to
it; empty = every row), `kl_penalty` (kl, abs, mse, k3). A teacher is a model role that scores the student's tokens,
as the reference does: `teacher` for one, `teacher.<name>` for each of a mapping.
"""

import dataclasses
import re
from dataclasses import dataclass

from roll.configs.loader import ConfigError, field_help
from roll.configs.roles import ACTOR_WORKER, RoleSpec
from roll.configs.worker import WorkerConfig

TEACHER = "teacher"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class TeacherConfig(WorkerConfig):
    opd_kl_coef: float | None = field_help(
        None,
        "weight c of this teacher's per-token KL in the advantages (A = A_RL − Σ c·KL; pure: A = −Σ c·KL); null "
        "= 1.0 (ROLL's per-teacher key; a top-level opd_kl_coef does not exist in ROLL either)",
        bounds="(-inf, inf)",
    )
    tag_included: list[str] = field_help(
        default_factory=list,
        help="the data tags routed to this teacher (RLVR: the reward domains that take one of them; agentic: the "
        "environments of these tags); empty = every row. Rows no teacher takes get no KL term",
    )


def teacher_keys(block: dict) -> bool:
    """Whether a YAML `teacher` mapping is one role (it has a role's keys) rather than a mapping name → role."""
    return bool(set(block) & {field.name for field in dataclasses.fields(TeacherConfig)})


def teacher_roles(config) -> dict[str, TeacherConfig]:
    """Role name → the teacher's config, in the YAML's order: `teacher` (one teacher) or `teacher.<name>` (a
    mapping); empty where on-policy distillation is off."""
    return _entries(config.teacher) if config.opd_mode is not None else {}


def _entries(teacher) -> dict:
    if teacher is None:
        return {}
    if isinstance(teacher, WorkerConfig):
        return {TEACHER: teacher}
    return {f"{TEACHER}.{name}": worker for name, worker in teacher.items()}


def teacher_specs(config) -> dict:
    """extra_model_roles() of an OPD config: role → (RoleSpec, TeacherConfig). A teacher scores tokens, as the
    reference does (ActorWorker, a strategy that serves `score`), and is never trained."""
    return {name: (RoleSpec(name, ACTOR_WORKER, "score"), worker) for name, worker in teacher_roles(config).items()}


def name_teachers(config) -> None:
    """Each teacher's `name` from its key (as the loader names the other roles); a name in the YAML is refused."""
    for role, worker in _entries(config.teacher).items():
        if worker.name and worker.name != role:
            raise ConfigError(f"'{role}.name' is set from the role's key; remove it")
        worker.name = role


def kl_coef(teacher: TeacherConfig) -> float:
    return 1.0 if teacher.opd_kl_coef is None else float(teacher.opd_kl_coef)


def routes(config, present=None) -> dict[str, list[str]] | None:
    """Group (a row's routing value: RLVR its reward domain, agentic its environment tag) → the teacher roles that
    take its rows (ROLL's build_domain_to_teacher_names): the teachers without tags, and those listing one of the
    group's tags (`config.opd_routing()`'s; a group it does not list stands for its own tag). `present`: the groups
    to route (default: every configured one). None when no teacher lists tags: every teacher takes every row."""
    teachers = teacher_roles(config)
    if not any(worker.tag_included for worker in teachers.values()):
        return None
    tags = config.opd_routing()[1]
    return {
        group: [
            role
            for role, worker in teachers.items()
            if not worker.tag_included or set(worker.tag_included) & set(tags.get(group, {group}))
        ]
        for group in (tags if present is None else present)
    }


def check_opd(config) -> None:
    """The OPD rules of a policy-optimisation config (called by check_algorithm): teachers exactly when OPD is on,
    no reference role (ROLL's reference *is* the first teacher then), no KL loss or KL-in-reward, an OPD
    kl_penalty, and every teacher tag reachable."""
    from roll.algorithms import OPD_KL_PENALTIES

    mode, teacher = config.opd_mode, config.teacher
    if mode is None:
        if teacher is not None:
            raise ConfigError(
                "'teacher' is configured but use_opd is false, so nothing reads its log-probs: set use_opd: true "
                "(the RL advantages minus the teachers' KL), run examples/start_onpolicy_distill_pipeline.py (the "
                "teachers' KL alone), or remove 'teacher'"
            )
        return
    what = "use_opd: true" if mode == "mixed" else "on-policy distillation"
    if teacher is None or (isinstance(teacher, dict) and not teacher):
        raise ConfigError(
            f"{what} needs 'teacher': one role (teacher: {{model_args: ..., strategy_args: ...}}) or a mapping name "
            "→ role (teacher: {math: {...}, code: {...}}, each with opd_kl_coef and tag_included)"
        )
    if isinstance(teacher, dict):
        bad = [name for name in teacher if not _NAME.match(str(name))]
        if bad:
            raise ConfigError(f"'teacher' names {bad}: a teacher's name takes letters, digits, _ and - only")
    if config.reference is not None:
        raise ConfigError(
            f"'reference' is configured, but with {what} the teachers give the log-probs the advantages compare "
            "with and nothing reads a reference (ROLL refuses a reference with use_opd and replaces it in pure "
            "mode): remove 'reference'"
        )
    for key in ("use_kl_loss", "add_token_level_kl"):
        if getattr(config, key):
            raise ConfigError(
                f"'{key}' with {what}: ROLL computes that KL against its reference, which with on-policy "
                f"distillation is the first teacher (and 0 on rows no teacher takes); set {key}: false (the "
                "teachers' KL is already in the advantages)"
            )
    if config.kl_penalty not in OPD_KL_PENALTIES:
        why = (
            " ('full' needs full-vocabulary log-probs; on-policy distillation has one log-prob per token: ROLL's "
            "'full' fails with a shape error)"
            if config.kl_penalty == "full"
            else ""
        )
        raise ConfigError(
            f"'kl_penalty' = {config.kl_penalty!r} is not an on-policy distillation estimator{why}; choose one of "
            f"{list(OPD_KL_PENALTIES)} (ROLL's kl, abs, mse and k3)"
        )
    _check_teacher_tags(config)


def _check_teacher_tags(config) -> None:
    """A teacher tag no row can carry would leave that teacher without rows, silently."""
    key, groups = config.opd_routing()
    known = set(groups) | {tag for tags in groups.values() for tag in tags}
    for role, worker in teacher_roles(config).items():
        unknown = [tag for tag in worker.tag_included if tag not in known]
        if unknown:
            raise ConfigError(
                f"'{role}.tag_included' names {unknown}, which no row can carry (rows are routed by their {key}; "
                f"known tags: {sorted(known)}): this teacher would never score a row"
            )


def opd_notes(config) -> list[str]:
    """--dry_run's lines on on-policy distillation: the mode, each teacher's weight and rows, rows without one."""
    teachers = teacher_roles(config)
    if not teachers:
        return []
    formula = "A = −Σ c·KL" if config.opd_mode == "pure" else "A = A_RL − Σ c·KL"
    lines = [
        f"on-policy distillation ({config.opd_mode}): {formula}, KL = {config.kl_penalty}(student old log-probs − "
        "teacher log-probs) per response token, then whitening / mask / clip"
    ]
    key = config.opd_routing()[0]
    table = routes(config)
    for role, worker in teachers.items():
        if table is None:
            rows = "every row"
        else:
            rows = f"{key}s {[group for group, names in table.items() if role in names]}"
        lines.append(f"  {role}: opd_kl_coef {kl_coef(worker):g}, {rows}")
    orphans = [group for group, names in (table or {}).items() if not names]
    if orphans:
        lines.append(f"  note: the rows of {key}s {orphans} go to no teacher: no KL term (advantage 0 in pure mode)")
    return lines
