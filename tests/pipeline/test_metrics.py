from pipeline.metrics import classification_report


def test_confusion_matrix_and_per_class_precision_recall():
    report = classification_report([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], ["a", "b", "c"])
    assert report["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert report["per_class"]["a"] == {"precision": 0.5, "recall": 0.5, "support": 2}
    assert report["per_class"]["b"] == {"precision": 2 / 3, "recall": 1.0, "support": 2}
    assert report["per_class"]["c"] == {"precision": None, "recall": 0.0, "support": 1}
