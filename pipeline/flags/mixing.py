"""The flags that soften a training batch's labels (label smoothing, mixup, cutmix), defined once for every
job's parser. Nothing here imports TensorFlow."""
from pipeline.flag_types import RecordedStore, below_one, fraction, non_negative_float


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
