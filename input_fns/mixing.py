"""Mixup, cutmix and label smoothing of a training batch, drawn statelessly from (seed, global step, replica).

Mixup (Zhang et al. 2018) blends each image with another of the same batch,
lambda * x_i + (1 - lambda) * x_j; cutmix (Yun et al. 2019) pastes a box of x_j
into x_i; both mix the labels with the same lambda, for cutmix the share of the
image left to x_i. As timm's Mixup (its default mode 'batch'): one lambda per
batch, drawn from Beta(alpha, alpha) of the method chosen; with both methods,
cutmix with probability `switch_prob`; the box's side is sqrt(1 - lambda) of the
image's, centred anywhere and clipped at the edges, and lambda corrected to the
area pasted. The partners j are a stateless permutation of the batch (each
replica mixes its own batch). Label smoothing moves `eps` of each label's mass
evenly over the classes, (1 - eps) * y + eps / classes.

The math is float32 under every precision; images go back to their dtype (an
integer batch is rounded), labels stay float32. The run loop's model_fn applies
these in TRAIN mode only (pipeline.estimator), so evaluation, prediction and the
export never see them.
"""
import tensorflow as tf

# Folded into the (seed, step, replica) seed so that these draws are not input_fns.augmentation's.
_SALT = 0x6D6978


def draws(batch, height, width, mixup_alpha, cutmix_alpha, switch_prob, seed, step, replica=0):
    """Returns the draws of one batch as a dict of tensors: 'permutation' (int32 [batch], each image's
    partner), 'cutmix' (bool: cutmix rather than mixup), 'mixup_lambda' (the Beta(mixup_alpha) draw),
    'cutmix_beta' (the Beta(cutmix_alpha) draw the box is cut for), 'box' (int32 [top, bottom, left,
    right), the pasted rows and columns) and 'lambda' (float32: the
    weight of each image's own label, the cutmix one corrected to the box's area).

    They are a function of the integers (`seed`, `step`, `replica`) alone; an alpha of 0 turns its
    method off (both 0: a mixup of lambda 1, the batch unchanged).
    """
    base = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64) * 1024 + tf.cast(replica, tf.int64)])
    base = tf.random.experimental.stateless_fold_in(base, _SALT)
    seeds = [tf.random.experimental.stateless_fold_in(base, i) for i in range(4)]
    permutation = tf.argsort(tf.random.stateless_uniform([batch], seeds[0]), stable=True)
    switch = tf.random.stateless_uniform([], seeds[1]) < switch_prob
    use_cutmix = tf.constant(cutmix_alpha > 0) & (switch if mixup_alpha > 0 else tf.constant(True))
    mixup_lambda, cutmix_beta = _beta(mixup_alpha, seeds[2]), _beta(cutmix_alpha, seeds[3])
    box = _box(cutmix_beta, height, width, tf.random.experimental.stateless_fold_in(seeds[3], 1))
    area = tf.cast((box[1] - box[0]) * (box[3] - box[2]), tf.float32)
    cutmix_lambda = 1.0 - area / tf.cast(height * width, tf.float32)
    return {"permutation": tf.cast(permutation, tf.int32), "cutmix": use_cutmix, "mixup_lambda": mixup_lambda,
            "cutmix_beta": cutmix_beta, "box": box, "lambda": tf.where(use_cutmix, cutmix_lambda, mixup_lambda)}


def _beta(alpha, seed):
    """Returns a float32 draw of Beta(alpha, alpha) (1.0 for alpha 0: no mixing), made of two gamma
    draws in float64 (an alpha below 1 puts much of a gamma's mass near 0)."""
    if alpha <= 0:
        return tf.constant(1.0, tf.float32)
    gammas = tf.random.stateless_gamma([2], seed, alpha=tf.constant(alpha, tf.float64), dtype=tf.float64)
    total = gammas[0] + gammas[1]
    return tf.cast(tf.where(total > 0, gammas[0] / tf.where(total > 0, total, 1.0), 0.5), tf.float32)


def _box(lam, height, width, seed):
    """Returns the cutmix box (int32 [top, bottom, left, right)) of `lam`, as timm's rand_bbox: sides
    sqrt(1 - lam) of the image's, cut to whole pixels, about a centre drawn over the whole image, clipped."""
    height, width = tf.cast(height, tf.int32), tf.cast(width, tf.int32)
    ratio = tf.sqrt(1.0 - lam)
    cut_h = tf.cast(tf.cast(height, tf.float32) * ratio, tf.int32)
    cut_w = tf.cast(tf.cast(width, tf.float32) * ratio, tf.int32)
    centre = tf.random.stateless_uniform([2], seed, minval=0, maxval=2 ** 30, dtype=tf.int32) % tf.stack([height, width])
    top = tf.clip_by_value(centre[0] - cut_h // 2, 0, height)
    bottom = tf.clip_by_value(centre[0] + cut_h // 2, 0, height)
    left = tf.clip_by_value(centre[1] - cut_w // 2, 0, width)
    right = tf.clip_by_value(centre[1] + cut_w // 2, 0, width)
    return tf.stack([top, bottom, left, right])


def mix(images, labels, mixup_alpha, cutmix_alpha, switch_prob, seed, step, replica=0):
    """Returns (images, labels) of a batch mixed as `draws` says: images ([batch, height, width,
    channels], any real or integer dtype, back in it) and labels ([batch, classes], float32) mixed
    with the same lambda. Both alphas 0 returns the batch as it is."""
    if not (mixup_alpha > 0 or cutmix_alpha > 0):
        return images, labels
    dtype = images.dtype
    height, width = (images.shape[i] if images.shape[i] is not None else tf.shape(images)[i] for i in (1, 2))
    with tf.name_scope("mixing"):
        drawn = draws(tf.shape(images)[0], height, width, mixup_alpha, cutmix_alpha, switch_prob, seed, step,
                      replica)
        x = tf.cast(images, tf.float32)
        partners = tf.gather(x, drawn["permutation"])
        mixed_up = drawn["mixup_lambda"] * x + (1.0 - drawn["mixup_lambda"]) * partners
        top, bottom, left, right = tf.unstack(drawn["box"])
        rows, columns = tf.range(height)[:, None], tf.range(width)[None, :]
        inside = (rows >= top) & (rows < bottom) & (columns >= left) & (columns < right)
        cut = tf.where(inside[None, :, :, None], partners, x)
        x = tf.where(drawn["cutmix"], cut, mixed_up)
        if dtype.is_integer:
            x = tf.round(tf.clip_by_value(x, dtype.min, dtype.max))
        x = tf.identity(tf.cast(x, dtype), name="mixed_images")
        y = tf.cast(labels, tf.float32)
        y = tf.identity(drawn["lambda"] * y + (1.0 - drawn["lambda"]) * tf.gather(y, drawn["permutation"]),
                        name="mixed_labels")
        return x, y


def smooth_labels(labels, eps):
    """Returns float32 `labels` ([batch, classes]) smoothed: (1 - eps) * labels + eps / classes;
    eps 0 returns them as they are."""
    if not eps:
        return labels
    with tf.name_scope("label_smoothing"):
        y = tf.cast(labels, tf.float32)
        return tf.identity(y * (1.0 - eps) + eps / float(y.shape[-1]), name="smoothed_labels")
