"""The data and training flags every job shares: the data, the batch, the length, the rate and its schedule, seeds and augmentation. Nothing here imports TensorFlow."""
from input_fns import AUGMENTATIONS
from models import LR_SCHEDULES, OPTIMIZERS, SGD_MOMENTUM
from pipeline import batching
from pipeline.flag_types import RecordedStore, augment_list, checkpoint_folder, int_in_range, non_negative_float, \
    open_fraction, positive_float, positive_int


def add_data_dir_flag(parser, default):
    """Adds --data-dir, the dataset's folder, with `default`."""
    parser.add_argument("--data-dir", default=default,
                        help="folder holding the dataset (a job of a published dataset downloads it there when "
                             "absent; the images job reads your folder of class folders)")


def add_data_flags(parser, task):
    """Adds the data group (--data-dir with `task`'s default, --synthetic); returns it."""
    d = task.defaults
    data = parser.add_argument_group("data")
    add_data_dir_flag(data, d["data_dir"])
    data.add_argument("--synthetic", action="store_true",
                      help="train and evaluate on generated data of the dataset's shapes (no download): one "
                           "random batch repeated, so accuracy can reach 1.0; for smoke runs and benchmarks")

    return data


def add_training_flags(parser, task):
    """Adds the training group, with `task`'s defaults and augmentation; returns it."""
    d = task.defaults
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", action=RecordedStore, type=positive_int, default=d["batch_size"],
                       help="images per replica per step; the global batch is this times the replicas")
    length = train.add_mutually_exclusive_group()
    length.add_argument("--epochs", action=RecordedStore, type=positive_float, default=d["epochs"],
                        help="passes over the training set, turned into a final global step")
    length.add_argument("--max-steps", action=RecordedStore, type=positive_int, default=None,
                        help="final global step, instead of --epochs (give one or the other); a resumed run stops "
                            "exactly there")
    train.add_argument("--learning-rate", action=RecordedStore, type=positive_float, default=d["learning_rate"],
                       help="learning rate at --reference-batch-size global images per step")
    train.add_argument("--lr-scaling", action=RecordedStore, choices=batching.LR_SCALING_RULES, default="linear",
                       help="'linear' multiplies the learning rate by global batch / reference batch; "
                            "'none' uses --learning-rate as it is")
    train.add_argument("--reference-batch-size", type=positive_int, default=d["reference_batch_size"],
                       help="global batch at which --learning-rate was tuned")
    train.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                       help="the rate over training: 'constant', 'cosine' decay to 0 at the final step, or 'step' "
                            "decay (x0.1 at half and three quarters of the final step)")
    train.add_argument("--warm-up-epochs", type=non_negative_float, default=0.0,
                       help="epochs over which the rate rises linearly to its full value first (Goyal et al.; "
                            "for large global batches)")
    train.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                       help=f"'adam' (the jobs' rates are tuned for it), or 'sgd' with Nesterov momentum {SGD_MOMENTUM:g} "
                            "(give its rate with --learning-rate)")
    train.add_argument("--weight-decay", type=non_negative_float, default=0.0, metavar="W",
                       help="decoupled weight decay (AdamW, SGDW): each step multiplies every kernel (not biases nor "
                            "normalisation scales) by 1 - rate x W, at the rate the step applies; 0: none")
    train.add_argument("--seed", type=int_in_range(0, 2 ** 31 - 1), default=None,
                       help="random seed for weights, shuffling and --augment's draws (0 for those without it)")
    train.add_argument("--deterministic", action="store_true",
                       help="reproduce the run bit for bit from --seed (0 without it): TensorFlow's op determinism, "
                            "a deterministic input order, and a resumed run's input going on where its checkpoint "
                            "stood (slower: see docs/benchmarks.md)")
    train.add_argument("--augment", type=augment_list(task.augment_defaults, task.augment_forbidden),
                       default="none", metavar="none|TRANSFORM[=VALUE],...",
                       help="random transforms of each training batch, never of evaluation or the export: "
                            f"{', '.join(AUGMENTATIONS)} (flip=horizontal|vertical|both; rotate in degrees; zoom, "
                            "translate and contrast as fractions), e.g. 'flip,rotate=10,zoom=0.1'; a name alone "
                            "takes the job's value: " + ", ".join(f"{k}={v:g}" if not isinstance(v, str) else
                                                                  f"{k}={v}" for k, v in task.augment_defaults.items()))
    train.add_argument("--ema", type=open_fraction, default=None, metavar="DECAY",
                       help="keep an exponential moving average of the weights (after each step: average = DECAY x "
                            "average + (1 - DECAY) x weights, from the starting weights; e.g. 0.999), checkpointed "
                            "with them; validation, the best model, the test figures and the export use it, and "
                            "results.json compares it with the raw weights (docs/validation.md)")
    train.add_argument("--init-from", default=None, metavar="MODEL_DIR", type=checkpoint_folder,
                       help="start a new run from the weights of another run's model dir (its best checkpoint on "
                            "validation, else its newest; its --ema average when it kept one), with a fresh "
                            "optimizer, step and schedule: fine-tune a trained head with more --trainable-layers "
                            "and a lower --learning-rate (docs/images.md); every weight comes from there, so no "
                            "--weights are loaded; a resumed run reads its own checkpoint instead")
    return train
