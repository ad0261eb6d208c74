"""Run configuration: YAML -> validated, frozen pydantic models.

Every key is checked when the config loads, before any model loads: unknown keys, wrong
types, impossible values and unknown operator names or parameters raise
:class:`ConfigError` with the key path and what is allowed. One model per concern
(model, LoRA, population, task, self-play, learner, evolution, evaluation, run).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from evolora.config.errors import format_validation_error
from evolora.config.evolution import EvolutionConfig, OperatorChoice
from evolora.config.fitness import FitnessConfig
from evolora.config.generation import GenerationConfig, check_engine, migrate_routing
from evolora.config.plays import PlayConfig, check_plays
from evolora.config.population import PopulationConfig, check_evolvable
from evolora.config.presets import preset_names, resolve_config_path
from evolora.config.renamed import Renamed, rename_keys, rename_path, report_renamed
from evolora.config.roles import ReviewConfig, RoleSampling
from evolora.config.run import RunConfig, check_workers
from evolora.config.selfplay import MatchmakingConfig, RewardConfig, SelfPlayConfig
from evolora.config.strict_yaml import MAX_CHARS, StrictYAMLError, check_text, load_yaml, short, yaml_error_line
from evolora.config.types import Algorithm, AutoBool, ConfigError, Device, Float, Int, LRSchedule, ThreadCount, _Section
from evolora.game import ARMS, Arm
from evolora.spelling import did_you_mean

__all__ = [
    "Config",
    "ConfigError",
    "EvalConfig",
    "EvolutionConfig",
    "FitnessConfig",
    "Float",
    "GenerationConfig",
    "Int",
    "LearnerConfig",
    "LoRAConfig",
    "MatchmakingConfig",
    "ModelConfig",
    "OperatorChoice",
    "PlayConfig",
    "PopulationConfig",
    "ReviewConfig",
    "RewardConfig",
    "RoleSampling",
    "RunConfig",
    "SelfPlayConfig",
    "StudyConfig",
    "TaskConfig",
    "apply_overrides",
    "check_resume",
    "config_from_dict",
    "dump_config",
    "load_config",
    "load_run_config",
    "parse_override",
]


class ModelConfig(_Section):
    name: str = "smollm2-135m-instruct"
    """Embedded name (``smollm2-135m-instruct``), a Hugging Face id, a local directory, or ``tiny-random``."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Dtype of the frozen base weights; ``auto``: bf16 on GPUs that support it, float32 on CPUs
    (:mod:`evolora.model.dtype`: bf16 learned less there, on one CPU, one task and 90 items, docs/results/dtype.md); ``bfloat16`` for about 2x speed on CPUs
    with AMX or AVX512-BF16; ``float16`` for GPUs without bf16. Adapters and their optimizer state
    always stay float32. Pin ``float32`` when runs on different hosts must give the same numbers."""
    num_threads: ThreadCount = "auto"
    """torch intra-op threads: ``auto`` takes the cores other processes leave free, checked again
    between steps and glanced at when each phase of a step starts (one thread per run when runs of a study run side by side; :mod:`evolora.model.threads`);
    an int is used as given (pin one when a run must replay bit for bit: thread counts change float
    sums); None keeps torch's default. Ray workers: 1 unless an int is given."""
    prepack: AutoBool = "auto"
    """oneDNN-packed copies of the frozen base's linears on the CPU, used by rollouts and updates alike
    (:mod:`evolora.model.prepack`): ``auto`` packs a float32 LM head of at least 2**20 weights (1 thread,
    batch 8: 2.45x faster for SmolLM2's) and the float32 decoder linears of at least 2**18 weights when
    their copies take at most 1/8 of the memory available (SmolLM2: +398 MB), where this torch has the
    ops and they pass a one-shot check; ``true`` packs the head and every frozen linear in float32 or
    bfloat16 on the CPU (an error where it cannot); ``false``: ``F.linear``."""
    device: Device = "auto"
    """Where the base, the adapters and every tensor live: ``auto`` (cuda when torch sees a GPU, else
    cpu), ``cpu``, ``cuda`` or ``cuda:N``, in process or on each Ray worker (one GPU each)."""


class LoRAConfig(_Section):
    rank: Int = Field(default=8, ge=1, le=1024)
    """LoRA rank r of every adapter (A: (r, d_in), B: (d_out, r))."""
    alpha: Float = Field(default=16.0, gt=0)
    """LoRA alpha; ΔW = (alpha / rank) · B A."""
    target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"
    """Linear modules that carry adapters: ``all-linear`` (every linear layer of the decoder blocks,
    attention and MLP, fused or not, never the LM head: :mod:`evolora.model.targets`), or leaf
    names such as ``[q_proj, v_proj]``."""
    init_b_std: Float = Field(default=1e-3, ge=0)
    """Std of the Gaussian init of B (PEFT's B = 0 would make every individual identical)."""

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("give at least one target module, e.g. [q_proj, v_proj]")
        return value


class TaskConfig(_Section):
    name: str = "gsm"
    """A registered task name (see ``evolora.tasks``), or ``package.module:factory`` for a task of your own
    (a Task subclass, or a function returning a Task; it fails with its name: ``evolora.tasks.user_task``)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the task's constructor (e.g. ``eval_path``, ``train_path``)."""


class LearnerConfig(_Section):
    algorithm: Algorithm = "grpo"
    """Advantage estimator: group-centred and std-normalised (GRPO), group-centred only (Dr. GRPO,
    arXiv 2503.20783) or group-centred then batch-normalised (REINFORCE++)."""
    lr: Float = Field(default=5e-5, gt=0, le=1)
    """AdamW learning rate of each adapter (at the first step under a schedule)."""
    lr_schedule: LRSchedule = "constant"
    """Learning rate over the run's steps: constant, or a half cosine down to ``lr_final`` × lr."""
    lr_final: Float = Field(default=0.1, ge=0, le=1)
    """Fraction of ``lr`` at the last step under ``cosine``."""
    clip_eps: Float = Field(default=0.2, gt=0, lt=1)
    """PPO ratio clip ε."""
    kl_coef: Float = Field(default=0.0, ge=0)
    """Weight of the k3 KL estimate to the base model (adapter disabled); 0 turns it off (paper)."""
    epochs: Int = Field(default=1, ge=1)
    """Gradient passes over each step's samples."""
    micro_batch: Int = Field(default=4, ge=1)
    """Sequences per forward/backward."""
    max_grad_norm: Float = Field(default=1.0, gt=0)
    """Clip each adapter's gradient to this global L2 norm before its AdamW step."""
    rewards: Literal["real", "permuted", "random"] = "real"
    """``permuted``: each GRPO group's rewards are shuffled among its samples (the ``random_reward``
    control of a study: the same groups and trained samples, no signal). ``random``: Gaussian draws
    with the mean and std of the step's real rewards of the role (trains on more samples than real
    rewards). :mod:`evolora.selfplay.reward_control`. Ratings, fitness and records keep the real outcomes."""
    weight_decay: Float = Field(default=0.0, ge=0)
    """AdamW weight decay of the adapter factors (0: none)."""
    on_nonfinite: Literal["rollback", "cull"] = "rollback"
    """When an adapter's factors hold NaN/Inf: restore its last finite factors, or replace it by a mutated copy of its role's best."""


class EvalConfig(_Section):
    enabled: bool = True
    """False: no held-out evaluation when the run ends (``evolora evaluate`` can run it later)."""
    limit: Int = Field(default=16, ge=0)
    """Held-out problems evaluated (greedy) per individual; 0 disables."""
    every: Int = Field(default=0, ge=0)
    """> 0: a learning curve: every k steps the solvers' greedy accuracy on the first ``curve_limit`` held-out items."""
    curve_limit: Int = Field(default=18, ge=1)
    """Held-out items of each learning-curve point (``every``); the step record's ``held_out_curve``."""
    max_new_tokens: Int = Field(default=192, ge=1)
    """Token cap of each greedy held-out answer."""
    batch_size: Int | None = Field(default=None, ge=1)
    """Held-out prompts per decode batch; None: the engine's default for the device (16 on a CPU,
    256 on a GPU: :data:`evolora.generation.engine.BATCH_SIZE`)."""
    members: Literal["all", "fittest"] = "all"
    """Which solvers (students, or the single agent) are evaluated: ``all``, each of them (member means,
    as the studies compare), or ``fittest``, the one with the highest fitness at the run's end
    (``evolution.fitness``; μ − 3σ by default). The fittest is chosen without the held-out items, so
    "fittest − base" is an unbiased comparison, where the best of ``all`` is chosen on the test set;
    at 2 students it halves the students' evaluation rows."""
    base: bool = True
    """Also evaluate the bare base model as a reference."""
    cache_base: bool = True
    """Reuse the base model's greedy answers from evolora's cache when the model (files and weights),
    tokenizer, engine, dtype, task and its grading settings, items, prompts, decoding and versions are
    the same and the entry matches its content hash (:mod:`evolora.evaluation.base_cache`); a damaged
    or mismatched entry is rebuilt with one line saying so. The summary says when the cache was used."""
    family: Int = Field(default=0, ge=0)
    """> 0: also this many items of the teachers' own problem family with numbers no teacher proposed
    (tasks that have one: ``gsm`` with ``proposal: numbers`` or ``seeded``), the same members and the
    base, reported beside the held-out set (:mod:`evolora.evaluation.family`); 0: none. Off with the
    held-out evaluation (``limit: 0``)."""
    critic_limit: Int = Field(default=16, ge=0)
    """Held-out problems of the critic evaluation (runs with critics only; 0 disables it)."""
    critic_samples: Int = Field(default=4, ge=1)
    """Sampled answers n per problem and answerer: majority-of-n and best-of-n by a critic."""


class StudyConfig(_Section):
    arm: str | None = None
    """The study arm this run belongs to (set by ``evolora study``; None for a plain run)."""
    arms: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """User arms of ``evolora study --arms``: name -> {dotted key: value}, e.g.
    ``{truncation: {evolution.selection: {name: truncation}}}``; the built-in names
    (:data:`evolora.study.BUILTIN_ARMS`) cannot be redefined."""


class Config(_Section):
    """The whole run configuration (one YAML file, e.g. ``tasks/gsm.yaml``)."""

    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    lora: LoRAConfig = LoRAConfig()
    population: PopulationConfig = PopulationConfig()
    task: TaskConfig = TaskConfig()
    selfplay: SelfPlayConfig = SelfPlayConfig()
    generation: GenerationConfig = GenerationConfig()
    learner: LearnerConfig = LearnerConfig()
    evolution: EvolutionConfig = EvolutionConfig()
    eval: EvalConfig = EvalConfig()
    study: StudyConfig = StudyConfig()

    @model_validator(mode="after")
    def _check_cross_fields(self) -> Config:
        check_workers(
            self.run, sum(self.role_sizes.values()) + self.selfplay.matchmaking.hall_of_fame, self.model.device
        )
        check_engine(self.generation, self.model.device)
        if not self.arm.evolve:
            if self.selfplay.matchmaking.hall_of_fame:
                raise ValueError(
                    "selfplay.matchmaking.hall_of_fame needs teachers and students; "
                    f"set it to 0 with selfplay.mode={self.selfplay.mode}"
                )
            if self.population.critics:
                raise ValueError(
                    "population.critics needs students to judge; set it to 0 with "
                    f"selfplay.mode={self.selfplay.mode} or use selfplay.mode=population"
                )
            if self.selfplay.plays or self.population.others:
                raise ValueError(
                    "selfplay.plays and further population.roles need the population arm; "
                    f"remove them with selfplay.mode={self.selfplay.mode} or use selfplay.mode=population"
                )
            return self  # one agent: the population and evolution sections are not used
        check_plays(self.population.roles, self.selfplay.plays, ARMS[self.selfplay.mode].roles)
        if self.evolution.enabled:  # no evolution event runs otherwise: its settings do not matter
            check_evolvable(self.population, self.evolution)
        return self

    @property
    def arm(self) -> Arm:
        """The arm of ``selfplay.mode`` (:data:`evolora.game.ARMS`): its game, role sizes and evolution,
        with the games of ``selfplay.plays`` after its own (:attr:`evolora.game.Arm.plays`)."""
        arm = ARMS[self.selfplay.mode]
        return replace(arm, plays=tuple(p.game for p in self.selfplay.plays)) if self.selfplay.plays else arm

    @property
    def role_sizes(self) -> dict[str, int]:
        """{role: members} of the run: the arm's fixed sizes, else ``population.roles``."""
        return dict(self.arm.sizes) if self.arm.sizes is not None else self.population.roles


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse one ``--set a.b.c=value`` override; the value is read as YAML.

    Raises:
        ConfigError: when ``=`` or the key is missing, or the value is not valid YAML.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects KEY=VALUE such as evolution.gamma=0.5, got {short(text, 80)}")
    shown = text if len(text) <= 80 and text.isprintable() else short(text, 80)
    try:
        check_text(key, "the key")
        check_text(raw, "the value", limit=MAX_CHARS)
        return key.strip().split("."), load_yaml(raw) if raw.strip() else ""
    except StrictYAMLError as error:
        raise ConfigError(f"--set {shown}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(
            f"--set {shown}: the value is not valid YAML ({yaml_error_line(error)}); quote strings"
        ) from None


def apply_overrides(data: dict, overrides: list[str], renamed: Renamed | None = None) -> dict:
    """Return a copy of ``data`` with each ``a.b=value`` override applied; an old key
    (:data:`evolora.config.renamed.RENAMED`) sets its new key, and the pair is appended to ``renamed``.
    A section given by its bare name (``evolution.selection=lexicase``) opens as ``{name: lexicase}``
    when a later override sets one of its parts (``evolution.selection.params.epsilon=0.1``)."""
    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        path, moved = rename_path(path)
        if renamed is not None:
            renamed += moved
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if isinstance(child, str):  # a bare name: the section's name
                child = node[part] = {"name": child}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {short(text, 80)}: {short(part)} is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


def config_from_dict(data: dict) -> Config:
    """Validate a plain dict into a :class:`Config`, including operator names and parameters.
    Old keys (:mod:`evolora.config.renamed`) are read under their new names, with one line on stderr.

    Raises:
        ConfigError: unknown keys, wrong types, impossible values, unknown operators or tasks, an
            old key given with its new one.
    """
    return _from_dict(data, [])


def _from_dict(data: dict, renamed: Renamed) -> Config:
    """:func:`config_from_dict`; ``renamed``: the old keys already renamed (by ``--set``), reported with the rest."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of sections (run, model, ...), got {type(data).__name__}")
    data, more = rename_keys(data)
    report_renamed([*renamed, *more])
    try:
        config = Config.model_validate(migrate_routing(data))
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, Config)) from None
    _check_operators(config)
    _check_task(config)
    return config


def _check_operators(config: Config) -> None:
    from evolora.config.operator_choice import check_sampling, resolve_operators  # torch only: no model code

    try:
        operators = resolve_operators(config.evolution)
        if config.arm.evolve and config.evolution.enabled:
            check_sampling(config.evolution, operators, config.role_sizes, config.arm.game.solver)
    except ValueError as error:
        raise ConfigError(f"invalid config:\n  {error}") from None


def _check_task(config: Config) -> None:
    from evolora.tasks import TASKS, check_task
    from evolora.user_code import UserCodeError

    try:
        check_task(config.task.name, config.task.params)
    except (ValueError, TypeError, FileNotFoundError, UserCodeError) as error:
        raise ConfigError(f"invalid config:\n  task: {error}") from None
    if config.selfplay.guidance != "none" and not getattr(TASKS[config.task.name], "reference_solutions", False):
        raise ConfigError(
            f"invalid config:\n  selfplay.guidance: task {config.task.name!r} writes no reference "
            "solutions; set selfplay.guidance: none (arith has them)"
        )


def load_config(path: str | Path, overrides: list[str] | None = None, *, seed: int | None = None) -> Config:
    """Read a YAML config (a path, or a preset name such as ``"arith"``: :mod:`evolora.config.presets`),
    apply ``--set`` overrides and the seed, and validate it.

    Raises:
        ConfigError: unreadable or undecodable file, malformed YAML, a top level that is not a
            mapping (an empty file included), or any invalid value (message names the key).
    """
    path = resolve_config_path(path)  # a file, else a preset name: "gsm", "arith.yaml"
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(
            f"cannot read config {path}: {error.strerror}; {did_you_mean(path.stem, preset_names())}give a path to "
            f"a YAML file such as tasks/gsm.yaml or a preset name ({', '.join(preset_names())})"
        ) from None
    return _validated(_mapping(path, raw), overrides or [], seed)


def load_run_config(
    run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *, seed: int | None = None
) -> Config:
    """The config a run directory stores (``RUN_DIR/config.yaml``), with ``--set`` overrides and
    the seed applied, validated (what ``--resume``, ``evolora evaluate`` and studies read).

    Raises:
        OSError: the file cannot be read; ConfigError: undecodable, not a mapping, malformed or invalid values.
    """
    path = Path(run_dir) / "config.yaml"
    return _validated(_mapping(path, path.read_bytes()), list(overrides), seed)


def _mapping(path: Path, raw: bytes) -> dict:
    """The top-level mapping of a YAML file's bytes; ConfigError (one line, naming ``path``) otherwise."""
    try:
        data = load_yaml(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, yaml.reader.ReaderError) as error:  # binary, or not UTF-8
        offset = error.start if isinstance(error, UnicodeDecodeError) else error.position
        raise ConfigError(f"{path} is not a YAML text file ({error.reason} at offset {offset})") from None
    except StrictYAMLError as error:
        raise ConfigError(f"{path}, {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {yaml_error_line(error)}") from None
    if not isinstance(data, dict):
        got = "an empty document" if data is None else f"the {type(data).__name__} {short(data, 40)}"
        raise ConfigError(f"{path}: a config must be a mapping of sections (run, model, ...), got {got}")
    return data


def _validated(data: dict, overrides: list[str], seed: int | None) -> Config:
    """Rename the file's old keys, apply the ``--set`` overrides (an old key sets its new one: the
    override wins, as any) and the seed (as ``run.seed``), then validate."""
    data, renamed = rename_keys(data)
    data = apply_overrides(data, overrides, renamed)
    if seed is not None and isinstance(data.setdefault("run", {}), dict):  # else validation names ``run``
        data["run"]["seed"] = seed
    return _from_dict(data, renamed)


CHECKPOINT_KEYS = (
    "model.name",
    "lora.rank",
    "lora.alpha",
    "lora.target_modules",
    "selfplay.mode",
    "selfplay.matchmaking.hall_of_fame",
)
"""Keys a run's checkpoints depend on (the bank's shapes and slots): ``--resume --set`` may not change
them, nor the population's role sizes."""


def check_resume(stored: Config, resumed: Config) -> None:
    """Refuse a resume whose overrides change what the run's checkpoints depend on.

    Raises:
        ConfigError: one of :data:`CHECKPOINT_KEYS` or a population size differs; the message names
            the key, both values and what to do (start a new run with ``--out``).
    """

    def value(config: Config, key: str):
        node = config
        for part in key.split("."):
            node = getattr(node, part)
        return node

    changed = [
        (key, value(stored, key), value(resumed, key))
        for key in CHECKPOINT_KEYS
        if value(stored, key) != value(resumed, key)
    ]
    if stored.role_sizes != resumed.role_sizes:
        changed.append(("population", stored.role_sizes, resumed.role_sizes))
    if changed:
        key, old, new = changed[0]
        raise ConfigError(
            f"--resume cannot change {key} ({short(old)} -> {short(new)}): the run's checkpoints "
            "depend on it; start a new run with --out instead"
        )


def dump_config(config: Config) -> str:
    """The resolved config as YAML text (what the run directory stores); the keys of further roles
    and games (``population.others``, ``selfplay.plays``) only when set, so a run without them
    stores what it stored before they existed."""
    data = config.model_dump(mode="json")
    for section, key in (("population", "others"), ("selfplay", "plays")):
        if not data[section][key]:
            del data[section][key]
    return yaml.safe_dump(data, sort_keys=False)
