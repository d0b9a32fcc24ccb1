"""The argparse types of every command line, its help formatter and its parser: each type turns a
flag's text into its value or raises ArgumentTypeError, which the parser reports in one line with
exit 2. Nothing here imports TensorFlow."""
import argparse
import csv
import difflib
import os
import sys

import hooks
from acquisition.image_checks import NOT_UTF8, is_not_utf8
from input_fns import AUGMENTATIONS, FLIP_DIRECTIONS


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, exit 2: the problem, the nearest flag for an
    unknown one, and where the flags are listed (argparse printed its whole usage first, 50 lines).
    `also_known`: another parser whose flags the same command line takes (a tool's, beside a job's)."""
    also_known = None

    _argv = ()

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)  # (a missing flag's error names a misspelt one)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}{self._nearest(message)}; --help lists the flags\n")

    def _nearest(self, message):
        """Returns ' (did you mean --max-steps?)' for the unknown flags of an unrecognized-arguments error, or
        of the command line when a required flag is missing (--modle for --model); '' when none is near."""
        parsers = [self] + ([self.also_known] if self.also_known else [])
        known = {flag for parser in parsers for flag in parser._option_string_actions}
        if message.startswith("unrecognized arguments:"):
            words = message.split()[2:]
        elif message.startswith("the following arguments are required:"):  # (not a prefix argparse took)
            words = [word for word in map(str, self._argv) if word.split("=")[0] not in known and
                     len([flag for flag in known if flag.startswith(word.split("=")[0])]) != 1]
        else:
            return ""
        names = [flag[2:] for flag in known if flag.startswith("--") and flag != "--help"]  # '--' would count
        guesses = [(word.split("=")[0], difflib.get_close_matches(word.split("=")[0][2:], names, n=1, cutoff=0.6))
                   for word in words if word.startswith("--")]
        named = [f"--{guess[0]}" for _, guess in guesses if guess]
        if not named:
            return ""
        given = [word for word, guess in guesses if guess]
        return (f" (did you mean {', '.join(named)}?)" if message.startswith("unrecognized") else
                f" ({', '.join(given)} given: did you mean {', '.join(named)}?)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except where there is none to show (None, or off for a switch):
    such flags say in their help what happens without them."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or (isinstance(default, (list, tuple)) and not default):
            return action.help
        if isinstance(default, (list, tuple)) and all(isinstance(item, str) for item in default):
            return f"{action.help} (default: {','.join(default)})"  # as the flag is typed, not a Python list
        return super()._get_help_string(action)


GLOB_CHARACTERS = "[*?\\"


def checkpoint_folder(text):
    """Returns the path `text` of a model dir (or a file in one); ArgumentTypeError when it holds a character
    TensorFlow's checkpoint readers take for a glob pattern: they found nothing at runs/exp[1] (it matches
    runs/exp1), or another run's files at runs/exp? (runs/exp1's; and a run's clean-up globs its model dir
    too); or a name that is not UTF-8, which TensorFlow's file functions cannot take (a traceback, before)."""
    if is_not_utf8(text):
        raise argparse.ArgumentTypeError(f"{text!r} {NOT_UTF8}")
    found = [character for character in GLOB_CHARACTERS if character in text]
    if found:
        raise argparse.ArgumentTypeError(
            f"{text}: TensorFlow's checkpoint readers take its {' and '.join(found)} for a pattern matching other "
            "names (they would find no checkpoint there, or another folder's); pass a path without [ * ? \\ "
            "(rename a folder that has them to train on in it)")
    return text


def model_path(text):
    """Returns predict.py's --model `text`: a .tflite file as it is (TFLite reads its path as a name), else a
    checkpoint_folder (a model dir or an export)."""
    return text if text.lower().endswith(".tflite") else checkpoint_folder(text)


def output_folder(text):
    """Returns the path `text` of a folder a tool writes into (made if absent); ArgumentTypeError for an empty one
    (a shell's unset variable: the tool went on writing nothing) or an existing file, refused before the work,
    not after it."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path; pass the folder to write into")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a file; pass a folder (made if absent)")
    return text


def positive_int(text):
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _finite_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text):
    """argparse type: a finite number > 0."""
    value = _finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {text}")
    return value


def non_negative_float(text):
    """argparse type: a finite number >= 0."""
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def int_in_range(low, high):
    """Returns an argparse type: a whole number from `low` to `high`."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value
    return parse


def fraction(text):
    """argparse type: a number from 0 to 1, both included."""
    value = _finite_float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def below_one(text):
    """argparse type: a number from 0 to below 1."""
    value = _finite_float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to below 1, got {text}")
    return value


def open_fraction(text):
    """argparse type: a number strictly between 0 and 1."""
    value = _finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (both left out), got {text}")
    return value


def name_list(text):
    """argparse type: a comma-separated list of names (classes, say), none empty; returns a tuple,
    or None for a bare 'none'. Spaces around a name are dropped; a name in double quotes may hold commas
    and be 'none': '"none"' is a class called none, '"a,b",c' two classes, the first with a comma (CSV's
    quoting: a quote inside one is doubled)."""
    if text.strip().lower() == "none":
        return None
    if text.count('"') % 2:
        raise argparse.ArgumentTypeError(f"cannot read the names in {text!r} (a quote is not closed); put a name "
                                         'with a comma or a quote in double quotes, a quote in it doubled ("a ""b""")')
    names = tuple(n.strip() for n in next(csv.reader([text], skipinitialspace=True), []))
    if not names or not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names such as CNV,DME, got {text!r}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"names {', '.join(repeated)} twice; give each name once")
    return names


def names_text(names):
    """Returns `names` (a tuple) as name_list reads them back: 'CNV,DME', '"none",CNV'; 'none' for none."""
    if not names:
        return "none"
    quoted = [f'"{n.replace(chr(34), chr(34) * 2)}"' if "," in n or '"' in n or n.lower() == "none" else n
              for n in names]
    return ",".join(quoted)


def hook_names(text):
    """argparse type: a comma-separated list of hook names from the hooks registry."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in hooks.HOOKS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown hook {', '.join(unknown)}; known hooks: {', '.join(sorted(hooks.HOOKS))}")
    return names


# The largest value each numeric transform takes: degrees for rotate, fractions for the rest.
_AUGMENT_LIMITS = {"rotate": 180.0, "zoom": 0.9, "translate": 1.0, "contrast": 0.9}


def augment_list(defaults, forbidden):
    """Returns an argparse type for --augment: 'none', or transforms such as
    'flip,rotate=10,zoom=0.1' parsed to [(name, value)]; a name alone takes its value from
    `defaults`, and what `forbidden` names ('name' or 'name=value': the reason) is refused."""
    def parse(text):
        if text.strip() == "none":
            return []
        transforms = []
        for item in text.split(","):
            name, _, value = (part.strip() for part in item.partition("="))
            if name not in AUGMENTATIONS:
                raise argparse.ArgumentTypeError(f"unknown transform {name!r}; known: {', '.join(AUGMENTATIONS)}, "
                                                 "or 'none'")
            if any(name == seen for seen, _ in transforms):
                raise argparse.ArgumentTypeError(f"{name} is given twice")
            value = _transform_value(name, value or defaults[name])
            reason = forbidden.get(name) or forbidden.get(f"{name}={value}")
            if reason:
                raise argparse.ArgumentTypeError(f"{name}={value} is not allowed for this job: {reason}")
            transforms.append((name, value))
        return transforms
    return parse


def _transform_value(name, value):
    if name == "flip":
        if value not in FLIP_DIRECTIONS:
            raise argparse.ArgumentTypeError(f"flip={value}: expected one of {', '.join(FLIP_DIRECTIONS)}")
        return value
    try:
        number = _finite_float(str(value))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{name}={value}: {e}") from None
    if not 0 < number <= _AUGMENT_LIMITS[name]:
        raise argparse.ArgumentTypeError(f"{name}={value}: must be greater than 0 and at most "
                                         f"{_AUGMENT_LIMITS[name]:g}")
    return number


class RecordedStore(argparse.Action):
    """Stores a flag's value, as argparse's default action does, and adds its dest to
    `args.explicit_flags`: what the user set on the command line, even to the default's value."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.explicit_flags = frozenset(getattr(namespace, "explicit_flags", ())) | {self.dest}


TFLITE_KINDS = ("float32", "float16", "int8")  # serving.tflite.KINDS, named here without importing TensorFlow
DEFAULT_TOLERANCE = 0.02  # test accuracy an int8 model may lose before the summary warns


def tflite_kinds(text):
    """argparse type: a comma-separated subset of TFLITE_KINDS (each once); returns them in TFLITE_KINDS'
    order, or () for 'none'."""
    if text.strip().lower() == "none":
        return ()
    kinds = [k.strip().lower() for k in text.split(",")]
    unknown = [k for k in kinds if k not in TFLITE_KINDS]
    if unknown or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(f"expected some of {','.join(TFLITE_KINDS)} (comma-separated, each once) "
                                         f"or none, got {text!r}")
    return tuple(k for k in TFLITE_KINDS if k in kinds)
