"""Early stopping: a rule read from the validation record after each evaluation, as Keras'
EarlyStopping reads `logs` (--stop-at-accuracy, --patience, --min-delta)."""
import dataclasses
from typing import Optional


def improvements_ago(evaluations, min_delta=0.0):
    """Returns how many evaluations came after the last one that improved on the validation accuracy
    early stopping watches by more than `min_delta` (0: any rise; a tie, whatever its loss, is no
    improvement), as Keras' EarlyStopping counts `wait`: the first evaluation sets the reference, and
    each improvement moves it to its own accuracy."""
    reference, since = None, 0
    for evaluation in evaluations:
        if reference is None or evaluation["validation_accuracy"] - min_delta > reference:
            reference, since = evaluation["validation_accuracy"], 0
        else:
            since += 1
    return since


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    """Stop at the first evaluation reaching `stop_at_accuracy`, or after `patience` evaluations
    without a rise in validation accuracy of more than `min_delta` (None: that rule is off)."""
    stop_at_accuracy: Optional[float] = None
    patience: Optional[int] = None
    min_delta: float = 0.0

    @property
    def active(self):
        """Returns whether any rule can stop training."""
        return self.stop_at_accuracy is not None or bool(self.patience)

    def reason(self, evaluations):
        """Returns why the last of `evaluations` (the record's) stops training ('target_accuracy',
        'patience'), or None."""
        if not evaluations:
            return None
        if self.stop_at_accuracy is not None and evaluations[-1]["validation_accuracy"] >= self.stop_at_accuracy:
            return "target_accuracy"
        if self.patience and improvements_ago(evaluations, self.min_delta) >= self.patience:
            return "patience"
        return None

    def as_dict(self):
        """Returns the rule for results.json ({'monitor', 'stop_at_accuracy', 'patience', 'min_delta'})."""
        return {"monitor": "validation_accuracy", "stop_at_accuracy": self.stop_at_accuracy,
                "patience": self.patience, "min_delta": self.min_delta if self.patience else None}

    def describe(self):
        """Returns the rule in words, for the run header."""
        rules = ([f"at validation accuracy >= {self.stop_at_accuracy:g}"] if self.stop_at_accuracy is not None
                 else []) + ([f"after {self.patience} evaluations without a rise in validation accuracy above "
                              f"{self.min_delta:g} (a tie is no rise)"] if self.patience else [])
        return " or ".join(rules) + "; the best model: highest validation accuracy, a tie to the lower loss"

    def describe_stop(self, reason):
        """Returns why training stopped, in words, for the log."""
        if reason == "target_accuracy":
            return f"validation accuracy reached --stop-at-accuracy {self.stop_at_accuracy:g}"
        return (f"{self.patience} evaluations without a rise in validation accuracy above {self.min_delta:g} "
                "(--patience, --min-delta)")


def early_stopping_of(settings):
    """Returns the EarlyStopping rule `settings` ask for (--stop-at-accuracy, --patience, --min-delta)."""
    return EarlyStopping(settings.stop_at_accuracy, settings.patience, settings.min_delta)
