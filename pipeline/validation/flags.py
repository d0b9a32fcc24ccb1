"""The flags of validation during training (a split held out from the training data, evaluated as
training goes, the best model kept, early stopping), defined once for every job's parser."""
from pipeline.flag_types import RecordedStore, below_one, fraction, positive_float, positive_int

DEFAULT_VALIDATION_FRACTION = 0.1  # why 0.1: docs/validation.md


def add_validation_flags(parser, defaults):
    """Adds the validation flags to `parser`, with a task's `defaults` ('validation_fraction'); returns
    their group."""
    group = parser.add_argument_group("validation")
    group.add_argument("--validation-fraction", type=below_one, action=RecordedStore,
                       default=defaults.get("validation_fraction", DEFAULT_VALIDATION_FRACTION),
                       help="share of each class of the training data held out for validation (seeded, "
                            "stratified; grouped by patient for OCT, whose --records-dir shards have none): "
                            "evaluated as training goes, it chooses the exported model; 0 turns it off (the last "
                            "checkpoint is exported and tested)")
    group.add_argument("--validation-dir", default=None,
                       help="a folder of class folders to validate on instead of a share of the training data "
                            "(folder datasets only)")
    cadence = group.add_mutually_exclusive_group()
    cadence.add_argument("--eval-every-epochs", type=positive_float, default=None,
                         help="evaluate on the validation split each time this many epochs of images have been "
                              "trained, counted across resumes. Default: every epoch, but never before 19x the "
                              "last evaluation's seconds of training since it, so that evaluation takes at most "
                              "5%% of training (the run header says so)")
    cadence.add_argument("--eval-every-steps", type=positive_int, default=None,
                         help="evaluate on the validation split every N global steps instead")
    group.add_argument("--stop-at-accuracy", type=fraction, default=None,
                       help="stop at the first evaluation whose validation accuracy reaches this")
    group.add_argument("--patience", type=positive_int, default=None,
                       help="stop after N evaluations in a row in which validation accuracy, the figure early "
                            "stopping watches, did not rise by more than --min-delta (a tie is no rise, whatever "
                            "its loss; the kept best model takes the lower loss on a tie)")
    group.add_argument("--min-delta", type=fraction, action=RecordedStore, default=0.0,
                       help="with --patience: the least rise in validation accuracy (a fraction: 0.01 is one point) "
                            "that counts as an improvement; 0 counts any rise, so a flat run stops")
    group.add_argument("--eval-only", action="store_true",
                       help="train nothing: evaluate the model dir's best checkpoint (or its latest) on the test "
                            "split and report")
    return group

