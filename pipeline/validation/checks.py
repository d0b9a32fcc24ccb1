"""The checks of the validation flags against the data a run has: one line and exit 2 for a split,
a cadence or an early stop that cannot act."""
from pipeline.errors import FlagError


def check_validation_split(settings, data):
    """Raises FlagError (exit 2) when the command line asks for a validation split the data, `data`
    (TaskData), does not hold: --validation-fraction above 0 given, or --validation-dir, of --synthetic
    data (the default share is left off without a word); or a cadence (--eval-every-steps,
    --eval-every-epochs) with no split to evaluate."""
    if data.validation_input_fn is not None:
        return
    if data.source == "synthetic":
        asked = None
        if settings.validation_dir:
            asked = f"--validation-dir {settings.validation_dir} validates on real images"
        elif settings.validation_fraction and "validation_fraction" in settings.explicit_flags:
            asked = f"--validation-fraction {settings.validation_fraction:g} holds out a share of the training data"
        if asked:
            raise FlagError(f"{asked}, and --synthetic data (one generated batch repeated) has no validation split; "
                            "drop --synthetic to validate, or pass --validation-fraction 0")
    cadence = [flag for flag, value in (("--eval-every-steps", settings.eval_every_steps),
                                        ("--eval-every-epochs", settings.eval_every_epochs)) if value]
    if cadence:
        raise FlagError(f"{cadence[0]} sets how often the validation split is evaluated, and this run has none "
                        "(--validation-fraction 0, --synthetic data or prepared shards); drop it")


def check_early_stopping(settings, data):
    """Raises FlagError (exit 2) for early-stopping flags that cannot act: no validation split to watch
    (--min-delta without --patience is refused when the settings are built: pipeline.settings)."""
    asked = [flag for flag, value in (("--stop-at-accuracy", settings.stop_at_accuracy),
                                      ("--patience", settings.patience)) if value is not None]
    if asked and data.validation_input_fn is None:
        synthetic = data.source == "synthetic"  # which holds no split to hold out
        one = len(asked) == 1
        raise FlagError(f"{' and '.join(asked)} stop{'s' if one else ''} training on the validation split's "
                        f"accuracy, and {'--synthetic data has' if synthetic else 'this run has'} no validation "
                        f"split; drop {'it' if one else 'them'}"
                        f"{'' if synthetic else ', or hold out a split (--validation-fraction above 0)'}")
