"""A run's settings, fixed once: the parsed command line turned into a frozen object that checks
itself when built. A task's recipe (the Fashion job's for its shipped sample) comes as values that
make a new Settings, never by rewriting the old one; nothing below the roles changes a setting."""
import types

from pipeline.errors import FlagError
from pipeline.mixing import check_mixing


class FrozenSettingsError(AttributeError):
    """A setting was assigned after the settings were fixed."""


class Settings:
    """Read-only settings: each flag's value by its dest (`settings.batch_size`), `explicit_flags`
    (what the command line set, see pipeline.flag_types.RecordedStore) and `seed_defaulted`
    (--deterministic without --seed, which takes seed 0). Assigning raises FrozenSettingsError."""
    __slots__ = ("_values",)

    def __init__(self, values):
        object.__setattr__(self, "_values", types.MappingProxyType(dict(values)))

    @classmethod
    def from_args(cls, args):
        """Returns the checked Settings of the parsed command line `args` (an argparse Namespace).
        Raises FlagError (exit 2) for flags that cannot go together."""
        values = {"explicit_flags": frozenset(), **vars(args)}
        values["seed_defaulted"] = bool(values.get("deterministic")) and values.get("seed") is None
        if values["seed_defaulted"]:
            values["seed"] = 0
        settings = cls(values)
        settings.check()
        return settings

    def check(self):
        """Raises FlagError for flags that cannot act together, whatever the data: --min-delta without
        --patience, --at-specificity without --positive-classes, --tflite-tolerance without --tflite,
        --init-from with --eval-only, --optimizer sgd without its --learning-rate, and mixing flags that cannot
        act (pipeline.mixing.check_mixing)."""
        if "min_delta" in self.explicit_flags and not self._values.get("patience"):
            raise FlagError("--min-delta is the least improvement --patience counts; give --patience N with it")
        if "at_specificity" in self.explicit_flags and not self._values.get("positive_classes"):
            raise FlagError("--at-specificity is the referral decision's operating point, and this run makes no "
                            "referral decision; give --positive-classes NAME,NAME with it, or drop --at-specificity")
        if "tflite_tolerance" in self.explicit_flags and not self._values.get("tflite"):
            raise FlagError("--tflite-tolerance is the test accuracy a --tflite conversion may lose; give --tflite "
                            "KINDS with it, or drop --tflite-tolerance")
        if self._values.get("init_from") and self._values.get("eval_only"):
            raise FlagError("--init-from starts a new run's training from another run's weights, and --eval-only "
                            "trains nothing; drop one of them")
        if self._values.get("optimizer") == "sgd" and "learning_rate" not in self.explicit_flags \
                and not self._values.get("eval_only"):  # (an evaluation builds no optimizer)
            raise FlagError("--optimizer sgd needs a rate of its own: the job's default --learning-rate is tuned for "
                            "Adam; give --learning-rate with it")
        check_mixing(self)

    def replace(self, **changes):
        """Returns new Settings with `changes` (a task's recipe, say), checked again."""
        settings = Settings({**self._values, **changes})
        settings.check()
        return settings

    def as_dict(self):
        """Returns a copy of every setting, by dest."""
        return dict(self._values)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}") from None

    def __setattr__(self, name, value):
        raise FrozenSettingsError(f"settings are fixed once: {name} cannot be set to {value!r} here; "
                                  "make new Settings with replace()")

    def __repr__(self):
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in sorted(self._values.items()))})"


def settings_of(args):
    """Returns `args` as Settings: themselves when they are already (a tool may pass either)."""
    return args if isinstance(args, Settings) else Settings.from_args(args)
