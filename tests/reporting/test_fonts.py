"""Class names in plots: drawn in the default font, in an installed font behind it that has the glyphs it lacks,
or, where no installed font can draw a name, labelled by its index (which report.md names)."""
import warnings

import numpy as np
import pytest

from reporting.clinical import clinical_report
from reporting.files import markdown, plot_pngs
from reporting.fonts import class_labels

NEVER_DRAWN = "\ufdd0"  # a noncharacter: Unicode assigns it no glyph, and no font maps it


def default_font_characters():
    from matplotlib import font_manager, ft2font
    return set(ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties())).get_charmap())


def a_character_only_stix_has():
    """Returns a printable character of matplotlib's own STIXGeneral font (shipped with it) that the default font
    lacks."""
    from matplotlib import font_manager, ft2font
    stix = ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties(family="STIXGeneral"),
                                                 fallback_to_default=False))
    extra = sorted(c for c in set(stix.get_charmap()) - default_font_characters()
                   if chr(c).isprintable() and chr(c).isalpha())
    assert extra, "STIXGeneral has no letter the default font lacks"
    return chr(extra[0])


def missing_glyph_warnings(label, settings):
    """Returns the warnings matplotlib gives drawing `label` as a tick label under `settings`."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context(settings):
        warnings.simplefilter("always")
        figure, axes = plt.subplots()
        axes.set_xticks([0], [label])
        figure.canvas.draw()
        plt.close(figure)
    return [str(w.message) for w in caught if "missing from" in str(w.message)]


def test_names_the_default_font_draws_are_left_as_they_are():
    assert class_labels(["cat", "Ωmega", "été"]) == ({}, ["cat", "Ωmega", "été"])


def test_a_name_no_installed_font_can_draw_is_labelled_by_its_index():
    settings, labels = class_labels(["cat", "dog" + NEVER_DRAWN, NEVER_DRAWN])
    assert labels == ["cat", "class 1", "class 2"]
    assert missing_glyph_warnings(labels[1], settings) == []


def test_an_index_label_never_takes_the_name_of_another_class():
    settings, labels = class_labels(["class 1", NEVER_DRAWN, "(class 1)", "class 0"])
    assert labels == ["class 1", "((class 1))", "(class 1)", "class 0"]
    assert len(set(labels)) == len(labels)


def test_a_name_the_default_font_lacks_is_drawn_in_an_installed_font_that_has_it():
    letter = a_character_only_stix_has()
    name = f"x{letter}"
    settings, labels = class_labels(["cat", name])
    assert labels == ["cat", name]
    assert settings["font.family"][1] != settings["font.family"][0]
    assert missing_glyph_warnings(name, {}), "the default font drew it: the test proves nothing"
    assert missing_glyph_warnings(name, settings) == []


def test_report_md_names_the_classes_its_plots_label_by_index():
    rng = np.random.default_rng(0)
    names = ["blue", "red" + NEVER_DRAWN, "green"]
    labels = np.repeat(np.arange(3), 20)
    probabilities = rng.dirichlet(np.ones(3), size=60)
    report = clinical_report(probabilities, labels, names, resamples=10)
    assert f"class 1 = red{NEVER_DRAWN}." in markdown(report)
    assert "label by index" not in markdown(clinical_report(probabilities, labels, ["blue", "red", "green"],
                                                             resamples=10))
    assert all(png.startswith(b"\x89PNG") for png in plot_pngs(report, probabilities, labels).values())


def test_the_classes_labelled_by_index_are_named_for_the_text_beside_the_plot():
    from reporting.fonts import named_by_index
    assert named_by_index(["cat", "dog" + NEVER_DRAWN, NEVER_DRAWN]) == [f"class 1 = dog{NEVER_DRAWN}",
                                                                          f"class 2 = {NEVER_DRAWN}"]
    assert named_by_index(["cat", "été"]) == []
