"""Where things are and what they are called: the repository the workflow ships in, the paths a
config names, every results path (``Results``), and the parts of names built from keys and values.

A config path (a DeepSpeed JSON, the published numbers) is taken as given when it exists, so a
user's own file wins; otherwise it is one of the files shipped with the workflow, found from any
working directory. Torch- and pandas-free: Snakemake imports it while it parses.
"""

from __future__ import annotations

from pathlib import Path

#: The checkout this package runs from (``src/dashrepro`` is two levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_repo_path(path: str | Path) -> Path:
    """A config path as given if it exists (absolute, or relative to the working directory),
    else relative to the repository (files shipped with it, e.g. config/deepspeed/*.json)."""
    path = Path(path)
    return path if path.is_absolute() or path.exists() else REPO_ROOT / path


#: The folder under ``results/`` of the paper's published tables (rule ``published_table``).
PUBLISHED = "published"
#: Names under ``results/`` the layout owns: an experiment named so would write into them.
RESERVED_EXPERIMENT_NAMES = {
    PUBLISHED: "the paper's published tables",
    "README.md": "the results folder's README",
}


def experiment_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an experiment (its folder is ``results/<name>``), or None."""
    if name.startswith("."):
        # "." and ".." put the experiment's folders beside or above results/, not in it.
        return f"{name!r} starts with '.': its folder would not be a plain folder of results/"
    if name in RESERVED_EXPERIMENT_NAMES:
        return f"{name!r} is reserved for {RESERVED_EXPERIMENT_NAMES[name]} (results/{name})"
    return None


#: The data folder's splits (``Results.data``; the embedded default's ``Results.synthetic``).
TRAIN_DATA = "train.parquet"
VALIDATION_DATA = "validation.parquet"
#: The files of an embedded base model's folder (``Results.base_model``) the rules name.
MODEL_WEIGHTS = "model.safetensors"
SFT_HISTORY = "sft_history.parquet"
#: The files of a training run's folder (``Results.run``): one row per step, and the per-token
#: signals of the logged steps (``dashrepro.training.metrics``).
TRAIN_METRICS = "train_metrics.parquet"
TOKEN_TRACES = "token_traces.parquet"
#: One row per rollout trained on: its length, its tokens' weights and gates (``metrics``).
ROLLOUT_WEIGHTS = "rollout_weights.parquet"
#: The privileged teacher's context of every training problem, as the run rendered it.
TEACHER_CONTEXTS = "teacher_contexts.parquet"
#: The files of a checkpoint's evaluation folder (``Results.checkpoint_eval``): the generations,
#: the graded samples, the per-benchmark summary.
RESPONSES = "responses.parquet"
SAMPLES = "samples.parquet"
SUMMARY = "summary.json"
#: The files of a base model's evaluation folder (``Results.base_eval``).
BASE_ACCURACY = "accuracy.json"
STUDENT_SAMPLES = "student_samples.parquet"
TEACHER_SAMPLES = "teacher_samples.parquet"
#: The files of a base model's premise probe (``Results.premise_file``; dashrepro.premise): the
#: scored tokens, the rollouts, the prefix tree's branch points, the statistics (.csv, .md,
#: .json) and the figure (.png, .pdf).
PREMISE_TOKENS = "tokens.parquet"
PREMISE_ROLLOUTS = "rollouts.parquet"
PREMISE_BRANCHES = "branches.parquet"
PREMISE_STATISTICS = "statistics"
PREMISE_FIGURE = "premise"
#: The statistics folder's files (``Results.statistics``; dashrepro.analysis.statistics_report):
#: one CSV per estimator, the reproduction gap as a CSV and a figure (.png, .pdf), the report.
CELL_STATISTICS = "cell_statistics.csv"
PAIRED_DIFFERENCES = "paired_differences.csv"
HELDOUT_SELECTION = "heldout_selection.csv"
BASE_LIFT = "base_lift.csv"
SAMPLE_CHANGES = "sample_changes.csv"
REPRODUCTION_GAP = "reproduction_gap"
STATISTICS_REPORT = "report.md"
#: The audit's report (``Results.audit``; dashrepro.provenance.audit), as .md and .html.
AUDIT_REPORT = "report"


def checkpoint_folder(step) -> str:
    """The name of a run's PEFT checkpoint folder of ``step`` (in ``Results.run``)."""
    return f"checkpoint-{step}"


class Results:
    """Every path under ``results/<experiment>/``: the one place that spells the results layout.

    Rules, input functions, the plan and the audit ask it. Each method takes the keys that name
    a file; a key left at its default is Snakemake's wildcard of that name (``"{method}"``), so
    ``Results("tiny").run()`` is the train rule's pattern and ``Results("tiny").run("dash",
    "tiny", 0)`` one run's folder. Code that reads a set of files gets their keys beside them
    (``keys`` in a rule's params), never by parsing a path.
    """

    def __init__(self, experiment: str):
        self.root = f"results/{experiment}"

    # data and the base model
    def data(self, name: str) -> str:
        """A file of the prepared data: ``train.parquet``, ``validation.parquet``, ..."""
        return f"{self.root}/data/{name}"

    def synthetic(self, name: str) -> str:
        """A file of the generated synthetic data (before preparation)."""
        return f"{self.root}/data/synthetic/{name}"

    def benchmark(self, bench: str = "{bench}", suffix: str = "parquet") -> str:
        return self.data(f"benchmarks/{bench}.{suffix}")

    def tokenizer(self) -> str:
        return f"{self.root}/tokenizer/tokenizer.json"

    def base_model(self, scale: str = "{scale}") -> str:
        """The folder of a scale's SFT-warm-started embedded base model."""
        return f"{self.root}/base_model/{scale}"

    def base_eval(self, scale: str = "{scale}") -> str:
        """The folder of a base model's student and teacher evaluation."""
        return f"{self.root}/eval/base/{scale}"

    def base_eval_file(self, name: str, scale: str = "{scale}") -> str:
        """A file of ``base_eval``: ``BASE_ACCURACY``, ``STUDENT_SAMPLES``, ``TEACHER_SAMPLES``."""
        return f"{self.base_eval(scale)}/{name}"

    def premise_file(self, name: str, scale: str = "{scale}") -> str:
        """A file of a base model's premise probe: ``PREMISE_TOKENS``, ``PREMISE_ROLLOUTS``,
        ``PREMISE_BRANCHES``, or ``PREMISE_STATISTICS`` / ``PREMISE_FIGURE`` with an extension."""
        return f"{self.root}/premise/{scale}/{name}"

    # training, evaluation, selection
    def run(self, method: str = "{method}", scale: str = "{scale}", seed="{seed}") -> str:
        """The folder of one training run (its checkpoints and records)."""
        return f"{self.root}/runs/{method}/{scale}/seed{seed}"

    def run_file(self, name: str, method="{method}", scale="{scale}", seed="{seed}") -> str:
        """A record of ``run``: ``TRAIN_METRICS``, ``ROLLOUT_WEIGHTS``, ``TOKEN_TRACES`` or
        ``TEACHER_CONTEXTS``."""
        return f"{self.run(method, scale, seed)}/{name}"

    def adapter(self, method="{method}", scale="{scale}", seed="{seed}", step="{step}") -> str:
        return (
            f"{self.run(method, scale, seed)}/{checkpoint_folder(step)}/adapter_model.safetensors"
        )

    def checkpoint_eval(self, method="{method}", scale="{scale}", seed="{seed}", step="{step}"):
        """The folder of one checkpoint's evaluation (responses, samples, summary)."""
        return f"{self.root}/eval/{method}/{scale}/seed{seed}/step{step}"

    def checkpoint_file(self, name: str, method="{method}", scale="{scale}", seed="{seed}",
                        step="{step}") -> str:  # fmt: skip
        """A file of ``checkpoint_eval``: ``RESPONSES``, ``SAMPLES`` or ``SUMMARY``."""
        return f"{self.checkpoint_eval(method, scale, seed, step)}/{name}"

    def selection(self, method="{method}", scale="{scale}", seed="{seed}") -> str:
        return f"{self.root}/selection/{method}/{scale}/seed{seed}.json"

    # reports
    def table(self, name: str = "{table}", ext: str = "{ext}") -> str:
        return f"{self.root}/tables/{name}.{ext}"

    def figure(self, name: str = "{figure}", ext: str = "{ext}") -> str:
        return f"{self.root}/figures/{name}.{ext}"

    def statistics(self, name: str) -> str:
        return f"{self.root}/statistics/{name}"

    def audit(self, name: str) -> str:
        return f"{self.root}/audit/{name}"

    def plan(self) -> str:
        return f"{self.root}/plan.md"

    def tracking(self) -> str:
        """Where the local experiment trackers write (not a Snakemake output: see tracking.py)."""
        return f"{self.root}/tracking"

    # a job's log and its timing (Snakemake's `benchmark:` file)
    def log(self, rule: str, key: str | None = None) -> str:
        return f"{self.root}/logs/{rule}{'/' + key if key else ''}.log"

    def job_timing(self, rule: str, key: str | None = None) -> str:
        """A job's wall time and memory (what Snakemake's ``benchmark:`` directive writes)."""
        return f"{self.root}/job_timings/{rule}{'/' + key if key else ''}.tsv"


def value_name(value) -> str:
    """A value as it appears in a name (a grid method's, a table row's): ``0.3`` -> ``0p3``,
    ``-1`` -> ``m1``, ``True`` -> ``true``."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(".", "p").replace("-", "m")


def run_key(method="{method}", scale="{scale}", seed="{seed}") -> str:
    """The part of a log or timing path that names one run."""
    return f"{method}/{scale}/seed{seed}"


def checkpoint_key(method="{method}", scale="{scale}", seed="{seed}", step="{step}") -> str:
    """The part of a log or timing path that names one checkpoint."""
    return f"{run_key(method, scale, seed)}/step{step}"
