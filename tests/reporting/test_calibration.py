"""Calibration figures against hand-computed values: ECE of calibrated and over-confident scores,
equal-count bins with ties, NLL and Brier score of three images, the resampled ECE, and
temperature scaling."""
import numpy as np
import pytest

from reporting import bootstrap, calibration, hparams


def calibrated_set(rng, n, classes=4):
    """Returns (probabilities [n, classes], labels drawn from them): calibrated by construction."""
    probabilities = rng.dirichlet(np.full(classes, 0.7), size=n)
    labels = (rng.random((n, 1)) > probabilities.cumsum(axis=1)).sum(axis=1)
    return probabilities, np.minimum(labels, classes - 1)  # a cumulative sum can end a hair below 1


def test_scores_the_labels_are_drawn_from_have_an_ece_close_to_0():
    probabilities, labels = calibrated_set(np.random.default_rng(11), 100_000)
    assert calibration.ece(*calibration.top_label(probabilities, labels)) < 0.01
    for k in range(4):
        assert calibration.ece(*calibration.one_against_rest(probabilities, labels, k)) < 0.01
    sharpened = calibration.apply_temperature(probabilities, 0.5)  # the same labels, over-confident
    assert calibration.ece(*calibration.top_label(sharpened, labels)) > 0.05


def test_every_image_0_9_confident_and_right_6_times_in_10_has_an_ece_of_0_3():
    rng = np.random.default_rng(0)
    probabilities = np.tile([0.05, 0.9, 0.05], (1000, 1))
    labels = rng.permutation(np.r_[np.ones(600, int), np.zeros(400, int)])  # right 60% of the time
    confidence, correct = calibration.top_label(probabilities, labels)
    assert calibration.ece(confidence, correct) == pytest.approx(0.3, abs=1e-12)
    assert calibration.bins_used(confidence) == 1  # equal scores share a bin


def test_ece_of_four_images_in_two_equal_count_bins():
    scores, outcomes = np.array([0.9, 0.6, 0.8, 0.7]), np.array([1.0, 1.0, 1.0, 0.0])
    # Bin 0: 0.6 and 0.7, observed 1 of 2: |0.5 - 0.65| = 0.15; bin 1: 0.8 and 0.9, both right: 0.15.
    assert list(calibration.equal_count_bins(scores, 2)) == [1, 0, 1, 0]
    assert calibration.ece(scores, outcomes, num_bins=2) == pytest.approx(0.5 * 0.15 + 0.5 * 0.15, abs=1e-12)
    assert calibration.reliability(scores, outcomes, 2) == [
        {"images": 2, "score": pytest.approx(0.65), "observed": 0.5},
        {"images": 2, "score": pytest.approx(0.85), "observed": 1.0}]


def test_fifteen_bins_hold_n_over_15_images_give_or_take_one():
    scores = np.random.default_rng(1).random(1003)
    assert set(np.bincount(calibration.equal_count_bins(scores))) == {66, 67}


def test_nll_and_brier_of_three_images():
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5]])
    labels = np.array([0, 2, 2])
    assert calibration.nll(probabilities, labels) == pytest.approx(-(np.log(0.7) + np.log(0.1) + np.log(0.5)) / 3)
    # (0.3^2 + 0.2^2 + 0.1^2) + (0.1^2 + 0.8^2 + 0.9^2) + (0.25^2 + 0.25^2 + 0.5^2) = 0.14 + 1.46 + 0.375
    assert calibration.brier(probabilities, labels) == pytest.approx(1.975 / 3)
    assert calibration.nll([[1.0, 0.0]], [1]) == pytest.approx(-np.log(calibration.EPSILON))  # finite


def test_a_resample_s_ece_is_the_ece_of_the_resampled_images_binned_afresh():
    rng = np.random.default_rng(4)
    scores, outcomes = np.round(rng.random(300), 2), (rng.random(300) < 0.6).astype(float)  # many ties
    weights = bootstrap.resample_weights(300, 20, rng)
    expected = [calibration.ece(np.repeat(scores, w.astype(int)), np.repeat(outcomes, w.astype(int)))
                for w in weights]
    np.testing.assert_allclose(calibration.weighted_ece(weights, scores, outcomes), expected, atol=1e-12)
    assert calibration.weighted_ece(np.ones((1, 300)), scores, outcomes)[0] == \
        pytest.approx(calibration.ece(scores, outcomes), abs=1e-12)


def test_the_ece_interval_resamples_patients_when_their_images_agree():
    rng = np.random.default_rng(7)
    patients = np.repeat(np.arange(100), 5)  # 5 scans each, scored and called alike
    probabilities = np.repeat(calibrated_set(rng, 100, 2)[0], 5, axis=0)
    labels = np.repeat(rng.integers(0, 2, 100), 5)
    widths = {}
    for unit, groups in (("image", None), ("group", patients)):
        report = calibration.calibration_report(probabilities, labels, ["a", "b"],
                                                bootstrap.Resamples(500, 400, 0, groups))
        low, high = report["ece"]["ci"]
        assert low <= report["ece"]["bias_corrected"] <= high
        widths[unit] = high - low
    assert widths["group"] > 1.5 * widths["image"]


def test_the_bias_corrected_ece_and_its_interval_find_the_population_s_ece_that_the_percentile_interval_misses():
    """Test sets of 200 images from a model whose confidence s comes true with probability s ** 1.5
    (over-confident), against the population's ECE over 15 equal-count bins, computed from a million
    confidences and the known probability, without drawing outcomes."""
    rng = np.random.default_rng(3)
    population = np.sort(rng.beta(5, 1.5, 1_000_000))
    truth = np.mean([abs(np.mean(b ** 1.5 - b)) for b in np.array_split(population, 15)])
    covered, errors, draws = {"basic": 0, "percentile": 0}, {"measured": [], "bias_corrected": []}, 60
    for seed in range(draws):
        scores = rng.beta(5, 1.5, 200)
        outcomes = (rng.random(200) < scores ** 1.5).astype(float)
        resamples = bootstrap.Resamples(200, 400, seed)
        statistic = lambda w: calibration.weighted_ece(w, scores, outcomes)  # noqa: E731
        figure = bootstrap.bias_corrected_figure(statistic, resamples)
        percentile = bootstrap.figure(statistic, resamples)["ci"]
        assert figure["value"] == pytest.approx(calibration.ece(scores, outcomes))
        assert figure["ci"][0] <= figure["bias_corrected"] <= figure["ci"][1]
        covered["basic"] += figure["ci"][0] <= truth <= figure["ci"][1]
        covered["percentile"] += percentile[0] <= truth <= percentile[1]
        errors["measured"].append(abs(figure["value"] - truth))
        errors["bias_corrected"].append(abs(figure["bias_corrected"] - truth))
    assert covered["basic"] >= 0.7 * draws and covered["percentile"] <= 0.4 * draws, covered
    assert np.mean(errors["bias_corrected"]) < 0.8 * np.mean(errors["measured"]), errors


def test_the_report_s_figures_are_the_plain_functions():
    probabilities, labels = calibrated_set(np.random.default_rng(2), 500, 3)
    report = calibration.calibration_report(probabilities, labels, ["a", "b", "c"], bootstrap.Resamples(500, 50))
    assert report["ece"]["value"] == pytest.approx(calibration.ece(*calibration.top_label(probabilities, labels)))
    assert report["nll"]["value"] == pytest.approx(calibration.nll(probabilities, labels))
    assert report["brier"]["value"] == pytest.approx(calibration.brier(probabilities, labels))
    assert report["bins"] == {"scheme": "equal-count", "requested": 15, "used": 15}
    assert sum(b["images"] for b in report["reliability"]) == 500
    per_class = report["per_class"]
    assert sum(f["brier"] for f in per_class.values()) == pytest.approx(report["brier"]["value"])
    assert sum(f["nll"] * f["images"] for f in per_class.values()) / 500 == pytest.approx(report["nll"]["value"])
    assert per_class["b"]["ece"]["value"] == pytest.approx(
        calibration.ece(*calibration.one_against_rest(probabilities, labels, 1)))


def test_temperature_scaling_undoes_over_confidence_and_lowers_the_nll():
    probabilities, labels = calibrated_set(np.random.default_rng(5), 20_000)
    over_confident = calibration.apply_temperature(probabilities, 0.5)
    temperature = calibration.fit_temperature(over_confident, labels)
    assert temperature == pytest.approx(2.0, rel=0.05)
    calibrated = calibration.apply_temperature(over_confident, temperature)
    assert (calibrated.argmax(axis=1) == over_confident.argmax(axis=1)).all()
    assert calibration.nll(calibrated, labels) < calibration.nll(over_confident, labels) - 0.05
    for nearby in (temperature * 0.99, temperature * 1.01):  # a minimum
        assert calibration.nll(calibrated, labels) <= calibration.nll(
            calibration.apply_temperature(over_confident, nearby), labels)
    assert calibration.fit_temperature(probabilities, labels) == pytest.approx(1.0, rel=0.05)


def test_the_temperature_report_is_the_plain_figures_before_and_after_scaling():
    rng = np.random.default_rng(6)
    validation, test = calibrated_set(rng, 2000), calibrated_set(rng, 1000)
    validation = (calibration.apply_temperature(validation[0], 0.5), validation[1])  # over-confident
    test = (calibration.apply_temperature(test[0], 0.5), test[1])
    temperature = calibration.fit_temperature(*validation)
    scaling = calibration.temperature_report(temperature, validation, test)
    scaled = calibration.apply_temperature(test[0], temperature)
    assert scaling["validation_nll"]["after"] < scaling["validation_nll"]["before"] == calibration.nll(*validation)
    assert scaling["test_ece"] == {"before": calibration.ece(*calibration.top_label(*test)),
                                   "after": calibration.ece(*calibration.top_label(scaled, test[1]))}
    assert scaling["test_nll"]["after"] == calibration.nll(scaled, test[1]) < scaling["test_nll"]["before"]
    assert scaling["test_ece"]["after"] < scaling["test_ece"]["before"] and not scaling["at_bound"]
    assert calibration.temperature_report(20.0, validation, test)["at_bound"]


def test_the_test_ece_is_a_figure_of_the_hparams_dashboard():
    results = {"eval_accuracy": 0.9, "clinical": {"calibration": {"ece": {"value": 0.04, "ci": [0.03, 0.06]}}}}
    assert hparams.final_figures(results) == {"final/test_accuracy": 0.9, "final/test_ece": 0.04}
