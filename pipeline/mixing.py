"""What a run does to its training labels (label smoothing, mixup, cutmix; the flags: pipeline/flags/mixing.py):
the Mixing its settings ask for, its checks, its header line and its results.json fields (imports no TensorFlow)."""
import dataclasses

from pipeline.errors import FlagError


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
