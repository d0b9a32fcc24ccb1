"""Jobs the run loop can train: each task says how to get its data and build its model.

A task's module (fashion.py, oct.py, images.py) holds its command line and the names of
its benchmark input variants, importable without TensorFlow; its job module (fashion_job.py,
...) gets the data, builds the model and the benchmark's input variants, and is imported only
when the arguments are known good. Nothing outside this package names a task.
"""
import dataclasses
from typing import Callable, Optional, Sequence

from acquisition import storage
from acquisition.files import write_text_atomically
from input_fns import FEATURE_KEY, FILE_KEY  # noqa: F401 (the jobs' feature keys: the models' input, the file names)
from pipeline import init_from
from pipeline.errors import FlagError
# --augment's values for a transform named alone ('flip': the task's safe flip), unless a task says otherwise.
AUGMENT_DEFAULTS = {"flip": "horizontal", "rotate": 10.0, "zoom": 0.1, "translate": 0.1, "contrast": 0.2}
# The benchmark's --input-only variant every task has: its own training input.
DEFAULT_INPUT_VARIANTS = ("pipeline",)
VALIDATION_FILES = "validation_files.txt"  # in the model dir: a folder dataset's validation split, one path a line


@dataclasses.dataclass(frozen=True)
class TaskData:
    """What the run loop needs to know of a task's data."""
    train_input_fn: Callable
    eval_input_fn: Callable
    num_train_examples: int
    num_eval_examples: int
    source: str  # 'real' or 'synthetic'
    # With class names (and real data) the run loop adds the test report (see
    # pipeline.evaluation_report); eval_labels, the class indices of the eval input in
    # its order when known, check that report's labels.
    class_names: Optional[Sequence[str]] = None
    eval_labels: Optional[Sequence[int]] = None
    # The training set's examples per class (in class_names order), when known:
    # what a training input's class mix should look like.
    train_class_counts: Optional[Sequence[int]] = None
    # With it, the run loop exports a SavedModel taking this serving input.
    serving_input_fn: Optional[Callable] = None
    report: dict = dataclasses.field(default_factory=dict)  # extra fields for results.json
    # The validation split held out from the training data (None when there is none): evaluated as
    # training goes, it chooses the model that is exported and tested.
    validation_input_fn: Optional[Callable] = None
    num_validation_examples: int = 0
    # The validation split's image files, for a folder dataset (None: shards, or no split): a resume
    # checks them against the VALIDATION_FILES list its model dir holds.
    validation_files: Optional[Sequence[str]] = None
    # The training recipe the task chose for this data, and why (the run header shows it); None for the flags'.
    recipe: Optional[str] = None
    # The settings that recipe sets ({'batch_size': 32, ...}; empty: the flags' own), and the defaults the task
    # resolves from other flags (the images job's --weights and --trainable-layers), which the run's settings
    # take before anything reads them (pipeline.run_setup).
    recipe_values: dict = dataclasses.field(default_factory=dict)
    # A function of n returning the training input_fn that starts n examples into its seeded stream
    # (skipped before decoding): where a resumed --deterministic run goes on. None: the input cannot.
    train_input_at: Optional[Callable] = None


@dataclasses.dataclass
class Task:
    """A training job: its name, flag defaults, extra flags, and `job`, a function that imports and
    returns the job module whose prepare_data and build_model get its data and build its model (an
    import inside a function: --help stays free of TensorFlow, and code navigation follows it)."""
    name: str
    description: str
    full_train_examples: Optional[int]  # the published dataset's training-set size (None: no such dataset)
    defaults: dict
    add_flags: Callable
    job: Callable
    # A regular expression whose first group, searched in an evaluation image's file name,
    # names its group (a patient): the test report's bootstrap then resamples groups.
    group_pattern: Optional[str] = None
    # --augment: each transform's value when named alone, and what the task forbids ('name' or
    # 'name=value') with the reason, said in the one-line refusal.
    augment_defaults: dict = dataclasses.field(default_factory=lambda: dict(AUGMENT_DEFAULTS))
    augment_forbidden: dict = dataclasses.field(default_factory=dict)
    # The benchmark's --input-only variants (the first is the task's training input); a job with
    # more than DEFAULT_INPUT_VARIANTS builds them in its input_variant function.
    input_variants: tuple = DEFAULT_INPUT_VARIANTS
    # A function of the run's Settings raising FlagError for those the task refuses whatever its data; called
    # before any folder is made (None: it refuses none beyond the common checks).
    check_settings: Optional[Callable] = None
    # The network a job without --model trains, as the run header names it (None: the header names none).
    network: Optional[str] = None

    def check(self, settings):
        """Raises FlagError for `settings` this task refuses whatever its data: an --init-from every job
        refuses (pipeline.init_from.check_folder), then its check_settings'."""
        init_from.check_folder(settings)
        if self.check_settings is not None:
            self.check_settings(settings)

    def prepare_data(self, args, batch_size):
        """Returns TaskData whose input_fns yield batches of `batch_size` (per replica)."""
        return self.job().prepare_data(args, batch_size)

    def build_model(self, args, learning_rate):
        """Returns the compiled Keras model (its input named FEATURE_KEY) trained at `learning_rate`."""
        return self.job().build_model(args, learning_rate)

    def input_variant(self, args, variant, batch_size, workdir):
        """Returns (input_fn, warm-up steps it needs at least) of the benchmark input variant
        `variant` (one of input_variants) at `batch_size`; `workdir` holds what it prepares."""
        job = self.job()
        if hasattr(job, "input_variant"):
            return job.input_variant(args, variant, batch_size, workdir)
        return job.prepare_data(args, batch_size).train_input_fn, 0


def write_validation_files(model_dir, files):
    """Writes `files`, one absolute path per line, to <model dir>/validation_files.txt (atomically: a cluster's
    workers may each write the same list); returns its path, or None when there is no such folder (a
    tool that reads a job's input, such as inspect_input.py, with no run's model dir)."""
    if not storage.isdir(model_dir):
        return None
    return write_text_atomically(storage.join(model_dir, VALIDATION_FILES),
                                 "".join(storage.absolute(name) + "\n" for name in files))


def trained_validation_list(model_dir):
    """Returns the path of `model_dir`'s validation list (VALIDATION_FILES) once the model dir has a checkpoint:
    a resume holds out the images it lists, as they were drawn; None before (a new run draws its split)."""
    if not model_dir or not storage.isfile(storage.join(model_dir, "checkpoint")):
        return None
    return storage.join(model_dir, VALIDATION_FILES)


def backbone_weights(weights, init_from):
    """Returns the weights a backbone is built with: 'none' with an --init-from folder, whose checkpoint then
    sets every weight (pipeline.initial_weights: nothing to download), else `weights` (--weights)."""
    return "none" if init_from else weights


def check_data_dir_given(settings):
    """Raises FlagError when `settings` name neither a --data-dir nor --synthetic (the images job's data has no
    default)."""
    if not settings.data_dir and not settings.synthetic:
        raise FlagError("pass --data-dir with a folder of class folders (DIR/<class>/<image>, or "
                        "DIR/{train,test}/<class>/<image>), or --synthetic")
