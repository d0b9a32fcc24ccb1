"""The flag of test-time augmentation (--tta: the views whose probabilities the test evaluation and
predict.py average; input_fns.views makes them). Nothing here imports TensorFlow."""
import argparse

from input_fns import CROP_FRACTION, CROP_VIEWS, FLIP_DIRECTIONS, FLIP_VIEWS, IDENTITY, flip_direction_of
TTA_HELP = ("test-time augmentation: average the class probabilities over views of each test image: 'flip' "
            "(the image and its mirror image; flip=vertical|both to choose the axis), 'crops' (the image, its four "
            "corner crops and centre crop of %g of each side, resized back), or both ('flip,crops'); 'none' "
            "(default) evaluates the image alone" % CROP_FRACTION)


def tta_views(flip_direction="horizontal", forbidden=None):
    """Returns an argparse type for --tta: 'none' gives (); 'flip', 'flip=DIRECTION', 'crops' (comma-separated)
    give the views' names, IDENTITY first. 'flip' alone takes `flip_direction` (the job's); a flip
    `forbidden` names ('flip' or 'flip=DIRECTION', as --augment's) is refused with its reason."""
    forbidden = forbidden or {}

    def parse(text):
        if text.strip().lower() == "none":
            return ()
        views = [IDENTITY]
        for item in text.split(","):
            name, _, value = (part.strip().lower() for part in item.partition("="))
            if name == "flip" and (value or flip_direction) in FLIP_DIRECTIONS:
                direction = value or flip_direction
                reason = forbidden.get("flip") or forbidden.get(f"flip={direction}")
                if reason:
                    raise argparse.ArgumentTypeError(f"flip={direction} is not a view this job allows: {reason}")
                views.append(FLIP_VIEWS[direction])
            elif name == "crops" and not value:
                views.extend(CROP_VIEWS)
            else:
                raise argparse.ArgumentTypeError(f"expected none, or flip[=horizontal|vertical|both] and/or crops, "
                                                 f"comma-separated, got {text!r}")
        if len(set(views)) != len(views):
            raise argparse.ArgumentTypeError(f"a view is given twice in {text!r}")
        return tuple(views)
    return parse


def add_tta_flag(group, task):
    """Adds --tta to `group` (an argparse group), with `task`'s flip direction and forbidden flips."""
    group.add_argument("--tta", type=tta_views(task.augment_defaults.get("flip", "horizontal"),
                                               task.augment_forbidden), default=(),
                       metavar="none|flip[=DIRECTION],crops",
                       help=TTA_HELP + "; validation during training never averages (see docs/clinical-report.md)")


def tta_text(views):
    """Returns --tta's value that gives `views` (tta_views' tuple): 'none', or e.g. 'flip=horizontal,crops'."""
    if not views:
        return "none"
    items = [f"flip={flip_direction_of(v)}" for v in views if flip_direction_of(v)]
    items += ["crops"] if set(CROP_VIEWS) <= set(views) else []
    return ",".join(items)
