"""Paired comparisons over seeds: each seed trains both arms, so the differences, not the two
means, carry the comparison. Student's t interval of the mean difference and an exact sign-flip
(permutation) test, which assumes nothing about the differences' distribution."""
import itertools
import math
import statistics

CONFIDENCE = 0.95


def student_t_quantile(probability, degrees):
    """Returns the `probability` quantile (above 0.5) of Student's t with `degrees` degrees of
    freedom: bisection on its CDF, integrated with Simpson's rule."""
    log_scale = math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2) - 0.5 * math.log(degrees * math.pi)

    def density(t):
        return math.exp(log_scale - (degrees + 1) / 2 * math.log1p(t * t / degrees))

    def cdf(x, intervals=4000):
        h = x / intervals
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, intervals))
        return 0.5 + h / 3 * (density(0.0) + inner + density(x))

    low, high = 0.0, 1.0
    while cdf(high) < probability:
        low, high = high, high * 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < probability else (low, middle)
    return (low + high) / 2


def sign_flip_p(differences):
    """Returns the exact two-sided p-value of the paired permutation test: the share of the 2^n sign
    assignments whose mean is at least as far from 0 as the observed mean."""
    observed = abs(sum(differences)) - 1e-12
    flips = list(itertools.product((1, -1), repeat=len(differences)))
    return sum(abs(sum(s * d for s, d in zip(signs, differences))) >= observed for signs in flips) / len(flips)


def compare(baseline, treated, higher_is_better):
    """Returns {'n', 'baseline', 'treated' (means), 'difference' (mean of treated - baseline),
    'ci' ([low, high], the t interval; None under two seeds), 'p' (sign-flip), 'better', 'worse'
    (seeds where the treated arm is better or worse)} over seeds paired by position."""
    if len(baseline) != len(treated) or not baseline:
        raise ValueError(f"paired comparison needs the same seeds on both sides, got {len(baseline)} and {len(treated)}")
    differences = [t - b for b, t in zip(baseline, treated)]
    n, mean = len(differences), statistics.fmean(differences)
    ci = None
    if n > 1:
        half = student_t_quantile(0.5 + CONFIDENCE / 2, n - 1) * statistics.stdev(differences) / math.sqrt(n)
        ci = [mean - half, mean + half]
    sign = 1 if higher_is_better else -1
    return {"n": n, "baseline": statistics.fmean(baseline), "treated": statistics.fmean(treated),
            "difference": mean, "ci": ci, "p": sign_flip_p(differences),
            "better": sum(sign * d > 0 for d in differences), "worse": sum(sign * d < 0 for d in differences)}
