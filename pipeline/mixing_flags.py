"""The flags that soften a training batch's labels (label smoothing, mixup, cutmix), defined once for every
job's parser, with their checks, their header line and their results.json fields (imports no TensorFlow)."""
import argparse
import dataclasses

from pipeline.errors import FlagError
from pipeline.flags import RecordedStore, _finite_float, fraction, non_negative_float


def below_one(text):
    """argparse type: a number from 0 to below 1."""
    value = _finite_float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to below 1, got {text}")
    return value


def add_mixing_flags(parser):
    """Adds --label-smoothing, --mixup, --cutmix and --mix-switch-prob to `parser`; returns their group."""
    group = parser.add_argument_group("label smoothing and mixing (training batches only)")
    group.add_argument("--label-smoothing", type=below_one, default=0.0, metavar="EPS",
                       help="train on labels (1 - EPS) x one-hot + EPS / classes; the evaluation loss stays the "
                            "plain cross-entropy (docs/augmentation.md)")
    group.add_argument("--mixup", type=non_negative_float, default=0.0, metavar="ALPHA",
                       help="blend each training batch with a permutation of itself, images and labels, by one "
                            "lambda ~ Beta(ALPHA, ALPHA) a step and replica (0.2 is common; 0 off)")
    group.add_argument("--cutmix", type=non_negative_float, default=0.0, metavar="ALPHA",
                       help="paste a box of another image of the batch into each, its side sqrt(1 - lambda) of the "
                            "image's, lambda ~ Beta(ALPHA, ALPHA), labels mixed by the area (1.0 is common; 0 off)")
    group.add_argument("--mix-switch-prob", type=fraction, action=RecordedStore, default=0.5, metavar="P",
                       help="with both --mixup and --cutmix: the probability of cutmix rather than mixup at a step")
    return group


@dataclasses.dataclass(frozen=True)
class Mixing:
    """What a run does to its training labels: the two methods' alphas (0 off), the chance of cutmix when
    both are on, and the label smoothing's eps."""
    mixup: float = 0.0
    cutmix: float = 0.0
    switch_prob: float = 0.5
    label_smoothing: float = 0.0

    def mixes(self):
        """Returns whether images are mixed (mixup or cutmix on)."""
        return self.mixup > 0 or self.cutmix > 0

    def __bool__(self):
        return self.mixes() or self.label_smoothing > 0


def mixing_of(args):
    """Returns the Mixing that `args` (a job's parsed flags) ask for."""
    return Mixing(getattr(args, "mixup", 0.0), getattr(args, "cutmix", 0.0), getattr(args, "mix_switch_prob", 0.5),
                  getattr(args, "label_smoothing", 0.0))


def check_mixing(args):
    """Raises FlagError (exit 2) for mixing flags that cannot act: --mix-switch-prob without both methods,
    or mixing a replica's batch of one image (its only partner is itself)."""
    mixing = mixing_of(args)
    if "mix_switch_prob" in getattr(args, "explicit_flags", ()) and not (mixing.mixup > 0 and mixing.cutmix > 0):
        raise FlagError("--mix-switch-prob chooses between --mixup and --cutmix at each step; give both (each "
                        "ALPHA above 0) with it, or drop it")
    if mixing.mixes() and args.batch_size < 2:
        method = "--mixup" if mixing.mixup > 0 else "--cutmix"
        raise FlagError(f"{method} mixes each image with another of its replica's batch, and --batch-size 1 holds "
                        "only itself; pass --batch-size 2 or more")


def results_fields(args):
    """Returns the results.json fields of `args`' mixing: label_smoothing, mixup, cutmix (0 off) and
    mix_switch_prob (null unless both methods are on)."""
    mixing = mixing_of(args)
    both = mixing.mixup > 0 and mixing.cutmix > 0
    return {"label_smoothing": mixing.label_smoothing, "mixup": mixing.mixup, "cutmix": mixing.cutmix,
            "mix_switch_prob": mixing.switch_prob if both else None}


def header_line(args):
    """Returns the run header's line of `args`' label smoothing and mixing, or '' when both are off."""
    mixing = mixing_of(args)
    if not mixing:
        return ""
    methods = [f"mixup alpha {mixing.mixup:g}"] * (mixing.mixup > 0) + [f"cutmix alpha {mixing.cutmix:g}"] * (
        mixing.cutmix > 0)
    described = " or ".join(methods) + (f" (cutmix at p={mixing.switch_prob:g})" if len(methods) == 2 else "")
    if mixing.mixes():
        described += f", drawn from seed {args.seed or 0}, the step and the replica"
    smoothing = f"label smoothing {mixing.label_smoothing:g}" if mixing.label_smoothing else ""
    return f"  mixing:        {'; '.join(part for part in (described, smoothing) if part)} (training only)\n"
