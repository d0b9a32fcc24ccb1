"""predict.py's client: folders walked, files classified in batches as they are read, progress shown."""
import os

import numpy as np
import pytest

from serving import ExportNotFoundError
from serving.predict import classify_files, image_paths, resolve_export_dir
from serving.predictor import Predictor
from tests.images_data import draw_shape, encode


def counting_predictor(calls):
    """A Predictor whose classify records each batch's size and answers 'a' for every image."""
    def classify(contents):
        calls.append(len(contents))
        return np.tile([[0.75, 0.25]], (len(contents), 1)), ["a"] * len(contents)
    return Predictor("export", ["a", "b"], classify)


def test_folders_are_walked_recursively_and_junk_left_out(tmp_path):
    png = encode(draw_shape("circle", 24, np.random.default_rng(0)), "RGB", "PNG")
    for path in ("x/1.png", "x/deep/er/2.PNG", "x/.hidden/3.png", "x/._4.png", "x/notes.txt", "x/Thumbs.db"):
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        (tmp_path / path).write_bytes(png)
    assert list(image_paths([str(tmp_path / "x"), "given.txt"])) == [
        str(tmp_path / "x" / "1.png"), str(tmp_path / "x" / "deep" / "er" / "2.PNG"), "given.txt"]


def test_pictures_in_formats_the_export_cannot_read_are_named_in_a_line_not_left_out_silently(tmp_path):
    png = encode(draw_shape("circle", 24, np.random.default_rng(0)), "RGB", "PNG")
    for path in ("x/1.png", "x/a.webp", "x/deep/b.TIF", "only/c.heic", "only/d.heic"):
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        (tmp_path / path).write_bytes(png)
    notes = []
    assert list(image_paths([str(tmp_path / "x")], note=notes.append)) == [str(tmp_path / "x" / "1.png")]
    assert notes == [f"left out 2 files of {tmp_path / 'x'} in formats the export cannot read (1 .tif, 1 .webp); "
                     "convert them to PNG or JPEG to classify them"]
    assert list(image_paths([str(tmp_path / "only")], note=notes.append)) == [str(tmp_path / "only")]
    assert notes[-1].startswith(f"left out 2 files of {tmp_path / 'only'} in formats the export cannot read (2 .heic)")
    os.remove(tmp_path / "only" / "d.heic")
    list(image_paths([str(tmp_path / "only")], note=notes.append))
    assert notes[-1].startswith(f"left out 1 file of {tmp_path / 'only'} in formats")  # (it said '1 files')


def test_heatmaps_explain_wrote_beside_the_images_are_left_out_of_a_folder_in_a_line(tmp_path):
    """A rerun on the folder its --explain had written into classified the heatmaps as images."""
    from serving.gradcam import write_heatmap_png
    image = draw_shape("circle", 24, np.random.default_rng(0))
    os.makedirs(tmp_path / "x")
    image.save(tmp_path / "x" / "1.png")
    write_heatmap_png(image, np.ones((3, 3), np.float32), str(tmp_path / "x" / "1.gradcam.png"),
                      str(tmp_path / "x" / "1.png"))
    image.save(tmp_path / "x" / "mine.gradcam.png")  # a picture of the user's of that name: no heatmap of ours
    notes = []
    assert list(image_paths([str(tmp_path / "x")], note=notes.append)) == [
        str(tmp_path / "x" / "1.png"), str(tmp_path / "x" / "mine.gradcam.png")]
    assert notes == [f"left out 1 Grad-CAM heatmap of {tmp_path / 'x'} (predict.py --explain's); name one to classify "
                     "it"]
    named = str(tmp_path / "x" / "1.gradcam.png")
    assert list(image_paths([named])) == [named]  # named, it is classified


def test_linked_folders_are_walked_each_once_and_a_link_up_the_tree_ends(tmp_path):
    """A linked subfolder was left out without a word; a link to a folder above must not walk forever."""
    png = encode(draw_shape("circle", 24, np.random.default_rng(0)), "RGB", "PNG")
    for path in ("other/1.png", "x/2.png"):
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        (tmp_path / path).write_bytes(png)
    os.symlink(tmp_path / "other", tmp_path / "x" / "linked")
    os.symlink(tmp_path / "other", tmp_path / "x" / "same")  # the same folder again: walked once
    os.symlink(tmp_path / "x", tmp_path / "x" / "up")  # a loop
    assert list(image_paths([str(tmp_path / "x")])) == [str(tmp_path / "x" / "2.png"),
                                                         str(tmp_path / "x" / "linked" / "1.png")]


def test_a_folder_without_images_is_an_error_in_its_place_and_the_answers_around_it_are_kept(tmp_path):
    """An empty folder raised inside the batching: the answers of every file before it in its batch (64 by default)
    were lost, and the files after it never classified."""
    png = encode(draw_shape("circle", 24, np.random.default_rng(0)), "RGB", "PNG")
    for path in ("x/1.png", "y/2.png"):
        os.makedirs(tmp_path / os.path.dirname(path))
        (tmp_path / path).write_bytes(png)
    for folder in ("empty", "junk"):
        os.makedirs(tmp_path / folder)
    (tmp_path / "junk" / "a.txt").write_text("notes")
    for batch_size in (1, 64):
        answers = list(classify_files(counting_predictor([]), [str(tmp_path / f) for f in ("x", "empty", "junk", "y")],
                                      batch_size=batch_size))
        assert [a["file"] for a in answers] == [str(tmp_path / f) for f in ("x/1.png", "empty", "junk", "y/2.png")]
        assert answers[0]["class"] == answers[3]["class"] == "a"
        assert answers[1]["error"] == answers[2]["error"] == (
            "a folder without images (JPEG, PNG, BMP or GIF files, or raw .gray pixels, at any depth); pass a folder "
            "that holds some, or the image files")


def test_many_files_go_through_in_batches_with_progress(tmp_path):
    source = tmp_path / "source.gif"
    source.write_bytes(encode(draw_shape("square", 24, np.random.default_rng(0)), "RGB", "GIF"))
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(1000):
        os.link(source, folder / f"{i:04d}.gif")
    (folder / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    calls, progress = [], []
    results = classify_files(counting_predictor(calls), [str(folder)], batch_size=64, progress_every_secs=0,
                             log=progress.append)
    first = next(results)  # a generator: the first answer comes before the other files are read
    assert calls == [64] and first == {"file": str(folder / "0000.gif"), "class": "a",
                                       "probabilities": {"a": 0.75, "b": 0.25}}
    rest = list(results)
    assert len(rest) == 1000 and max(calls) == 64 and sum(calls) == 1000
    assert rest[-1] == {"file": str(folder / "bad.jpg"), "error": "is truncated (no JPEG end marker)"}
    assert progress[0].startswith("classified 64 files (") and progress[-1].startswith("classified 1001 files")


def test_a_model_dir_an_export_folder_or_an_export_itself_name_the_newest_export(tmp_path):
    for version in ("1700000000", "1800000000"):
        (tmp_path / "export" / version).mkdir(parents=True)
        (tmp_path / "export" / version / "saved_model.pb").write_bytes(b"")
    newest = str(tmp_path / "export" / "1800000000")
    assert resolve_export_dir(str(tmp_path)) == newest  # the model dir
    assert resolve_export_dir(str(tmp_path / "export")) == newest
    assert resolve_export_dir(newest) == newest
    with pytest.raises(ExportNotFoundError, match="pass --model with a training run's model dir"):
        resolve_export_dir(str(tmp_path / "export" / "1700000000" / "variables"))


def test_a_model_dir_whose_run_has_exported_nothing_yet_is_told_so(tmp_path):
    """It was told to pass a training run's model dir, which it had."""
    (tmp_path / "model.ckpt-0.index").write_bytes(b"")  # killed before its first validation
    with pytest.raises(ExportNotFoundError, match=f"{tmp_path} holds a run that has exported no model yet"):
        resolve_export_dir(str(tmp_path))


def test_an_export_on_a_url_still_being_copied_is_passed_over_and_removed_by_the_next_run():
    import uuid
    from acquisition import storage
    from pipeline.model_dir import remove_leftovers
    from serving.export import COMPLETE_MARKER
    model_dir = f"ram://{uuid.uuid4().hex}/run"
    for version, whole in (("100", True), ("200", False)):  # 200: a run killed while copying it
        storage.makedirs(storage.join(model_dir, "export", version))
        storage.write_atomically(storage.join(model_dir, "export", version, "saved_model.pb"), b"pb")
        if whole:
            storage.write_atomically(storage.join(model_dir, "export", version, COMPLETE_MARKER), b"")
    assert resolve_export_dir(model_dir) == f"{model_dir}/export/100"
    with pytest.raises(ExportNotFoundError):
        resolve_export_dir(f"{model_dir}/export/200")
    assert remove_leftovers(model_dir) == [f"{model_dir}/export/200"]
    assert storage.listdir(storage.join(model_dir, "export")) == ["100"]


def test_gray_files_are_walked_and_a_model_without_pixels_refuses_them_naming_the_fix(tmp_path):
    (tmp_path / "x").mkdir()
    for name in ("a.gray", "B.GRAY", ".hidden.gray", "notes.txt"):
        (tmp_path / "x" / name).write_bytes(bytes(784))
    assert list(image_paths([str(tmp_path / "x")])) == [str(tmp_path / "x" / n) for n in ("B.GRAY", "a.gray")]
    calls = []
    results = list(classify_files(counting_predictor(calls), [str(tmp_path / "x"), str(tmp_path / "x" / "notes.txt"),
                                                              str(tmp_path / "x" / ".hidden.gray")]))
    assert calls == []  # a model without a pixels signature (counting_predictor's) is given nothing
    assert [r["error"] for r in results] == [
        "is raw pixels (.gray), which this model does not take: pass it as a JPEG, PNG, BMP or GIF file"] * 2 + [
        "is not a JPEG, PNG, BMP or GIF image; pass a JPEG, PNG, BMP or GIF file"] + [
        "is raw pixels (.gray), which this model does not take: pass it as a JPEG, PNG, BMP or GIF file"]  # by name


def test_gray_files_of_a_pixels_model_are_checked_for_size_and_classified_with_the_images(tmp_path):
    calls, seen = [], []

    def classify_pixels(pixels):
        calls.append(pixels.shape)
        seen.append(pixels)
        return np.tile([[0.25, 0.75]], (len(pixels), 1)), ["b"] * len(pixels)
    predictor = counting_predictor(calls)
    predictor.pixels_shape, predictor.classify_pixels = (28, 28, 1), classify_pixels
    pixels = bytes(range(256)) * 3 + bytes(16)  # 784: row 0 is 0..27, row 1 28..55, ...
    (tmp_path / "ok.gray").write_bytes(pixels)
    (tmp_path / "long.gray").write_bytes(bytes(785))
    (tmp_path / "c.png").write_bytes(encode(draw_shape("circle", 24, np.random.default_rng(0)), "RGB", "PNG"))
    paths = [str(tmp_path / n) for n in ("ok.gray", "long.gray", "c.png")]
    ok, long, image = classify_files(predictor, paths)
    assert calls == [(1, 28, 28, 1), 1]  # the pixels in one batch, the image file in another
    assert seen[0].dtype == np.uint8 and seen[0][0, 1, :3, 0].tolist() == [28, 29, 30]
    assert seen[0].tobytes() == pixels
    assert ok == {"file": paths[0], "class": "b", "probabilities": {"a": 0.25, "b": 0.75}}
    assert long["error"].startswith("is 785 bytes; a .gray file for this model holds exactly 784: one 28x28 gray ")
    assert image["class"] == "a"


def test_a_missing_file_says_where_a_relative_path_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    predictor = counting_predictor(calls)
    predictor.pixels_shape = (28, 28, 1)
    results = list(classify_files(predictor, ["typo.png", "typo.gray", str(tmp_path / "gone.png")]))
    assert calls == []
    assert [r["error"] for r in results] == [
        f"file not found; check the path (a relative path starts from the current folder, {tmp_path})"] * 2 + [
        "file not found; check the path"]


def test_a_looping_or_broken_link_and_a_pipe_are_named_as_they_are_not_as_missing(tmp_path):
    os.symlink("loop.png", tmp_path / "loop.png")
    os.symlink("nowhere.png", tmp_path / "broken.png")
    os.mkfifo(tmp_path / "pipe.png")
    calls = []
    results = list(classify_files(counting_predictor(calls), [str(tmp_path / n) for n in
                                                             ("loop.png", "broken.png", "pipe.png")]))
    assert calls == []
    assert [r["error"] for r in results] == [
        "a symbolic link that loops (too many levels of links); point it at an image, or pass the image itself",
        "a symbolic link that leads to nowhere.png, which does not exist; point it at an image, or pass the image "
        "itself",
        "not a file (a device, a pipe or a socket); pass an image file"]


def test_an_export_copied_in_part_is_named_in_one_line(tmp_path):
    """Without its class names it said 'a folder on that path is missing ... create it'; without variables/,
    TensorFlow's 'Unsuccessful TensorSliceReader constructor'."""
    from serving import ExportNotFoundError
    from serving.predict import load_predictor
    export = tmp_path / "1"
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ExportNotFoundError, match=r"lacks variables/variables.index and "
                                                  r"assets.extra/class_names.txt: it was copied in part"):
        load_predictor(str(tmp_path))


def test_a_cmyk_jpeg_is_refused_by_a_gray_model_in_our_words_and_classified_by_a_color_one(oct_sample, tmp_path):
    from tests.conftest import odd_jpegs
    normal = os.path.join(oct_sample, "NORMAL")
    cmyk, words = odd_jpegs(open(os.path.join(normal, sorted(os.listdir(normal))[0]), "rb").read())["cmyk"]
    (tmp_path / "scan.jpeg").write_bytes(cmyk)
    for channels in (1, 3):
        calls = []
        predictor = counting_predictor(calls)
        predictor.pixels_shape = (28, 28, channels)
        (result,) = classify_files(predictor, [str(tmp_path / "scan.jpeg")])
        if channels == 1:  # TensorFlow's decoder would say 'Unsupported color conversion request'
            assert calls == [] and result["error"].startswith(words + "; convert it to grayscale or RGB")
        else:
            assert calls == [1] and result["class"] == "a"


def test_tta_of_an_export_without_pixels_is_a_user_error_of_exit_2():
    from pipeline.errors import USER_ERRORS
    from serving import ViewsUnavailableError
    from serving.tta import with_views
    with pytest.raises(ViewsUnavailableError, match="--tta makes its views from pixels, and the export at export "
                                                    "has no pixels signature") as raised:
        with_views(counting_predictor([]), ["flip"])
    assert raised.value.exit_code == 2 and isinstance(raised.value, USER_ERRORS)  # one line, no traceback


def test_tta_refuses_the_views_the_export_records_as_refused_by_its_job():
    from input_fns import flip_views
    from serving import ViewsUnavailableError
    from serving.tta import with_views
    refused = flip_views({"flip=vertical": "upside down", "flip=both": "upside down"})
    assert refused == {"flip_vertical": "upside down", "flip_both": "upside down"}
    assert flip_views({"flip": "no flips"}) == {"flip": "no flips", "flip_vertical": "no flips",
                                                "flip_both": "no flips"}
    predictor = counting_predictor([])
    predictor.pixels_shape, predictor.classify_pixels = (28, 28, 1), lambda pixels: None
    predictor.forbidden_views = refused
    with pytest.raises(ViewsUnavailableError, match="^--tta flip=both is a view the job that trained export refuses: "
                                                    "upside down; leave it out$") as raised:
        with_views(predictor, ("identity", "flip", "flip_both"))
    assert raised.value.exit_code == 2
    assert with_views(predictor, ("identity", "flip")).classify is not predictor.classify  # horizontal: allowed


def test_a_model_no_run_here_made_is_refused_in_one_line_not_a_traceback(tmp_path):
    """A Keras model saved or converted elsewhere, with a class_names.txt put beside it: KeyError and TypeError."""
    import tensorflow as tf
    from serving.predict import load_predictor
    model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(3, activation="softmax")])
    saved = str(tmp_path / "saved")
    tf.saved_model.save(model, saved)
    os.makedirs(os.path.join(saved, "assets.extra"))
    (tmp_path / "saved" / "assets.extra" / "class_names.txt").write_text("a\nb\nc\n")
    with pytest.raises(ExportNotFoundError, match=r"is not an export a run here made: its serving_default signature "
                                                  r"takes input_\d+ \(float32\), not image files' contents"):
        load_predictor(saved)
    (tmp_path / "lite").mkdir()
    (tmp_path / "lite" / "model.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    (tmp_path / "lite" / "class_names.txt").write_text("a\nb\nc\n")
    with pytest.raises(ExportNotFoundError, match=r"model.tflite is not a model a run here converted: its signature "
                                                  r"takes .* \(float32, 4 dimensions\) and gives dense.*, not uint8"):
        load_predictor(str(tmp_path / "lite" / "model.tflite"))


def test_an_export_replaced_by_a_newer_best_while_it_loads_is_served_from_the_newest(tmp_path, monkeypatch):
    """predict.py beside a run that validates: the run exported a new best and removed the export predict.py had
    chosen, which it then called copied in part or damaged."""
    from serving import predict
    export = tmp_path / "export"
    (export / "1700000000").mkdir(parents=True)
    (export / "1700000000" / "saved_model.pb").write_bytes(b"")
    loaded = []

    def replaced_while_loading(export_dir):
        loaded.append(export_dir)
        if len(loaded) == 1:  # the run's new best replaces it, then the load fails on its files
            os.rename(export / "1700000000", export / "1800000000")
            raise ExportNotFoundError(f"the export {export_dir} cannot be loaded")
        return export_dir
    monkeypatch.setattr(predict, "_saved_model_predictor", replaced_while_loading)
    assert predict.load_predictor(str(tmp_path)) == str(export / "1800000000")
    assert loaded == [str(export / "1700000000"), str(export / "1800000000")]

    def damaged(export_dir):  # still there: damaged indeed, and said so
        raise ExportNotFoundError(f"the export {export_dir} cannot be loaded")
    monkeypatch.setattr(predict, "_saved_model_predictor", damaged)
    with pytest.raises(ExportNotFoundError, match="1800000000 cannot be loaded"):
        predict.load_predictor(str(tmp_path))


def test_a_class_names_file_of_another_count_is_named_in_words_that_agree():
    from serving.predictor import check_class_count
    with pytest.raises(ExportNotFoundError, match="names 1 class but the model at m has 3 outputs"):
        check_class_count(["a"], 3, "names.txt", "m")
    with pytest.raises(ExportNotFoundError, match="names 2 classes but"):
        check_class_count(["a", "b"], 3, "names.txt", "m")
    check_class_count(["a", "b", "c"], 3, "names.txt", "m")


def test_a_name_with_a_line_break_keeps_one_line_per_file(capsys):
    """A file named 'new\\nline.jpg' printed as two lines."""
    import importlib.util
    from tests.conftest import ROOT
    spec = importlib.util.spec_from_file_location("predict_script", os.path.join(ROOT, "scripts", "predict.py"))
    predict_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(predict_script)
    failed = predict_script._print([{"file": "in/new\nline.jpg", "class": "a", "probabilities": {"a": 0.75, "b": 0.25}},
                                    {"file": "in/bad\r.jpg", "error": "not an image"},
                                    {"file": "in/plain name.jpg", "class": "b", "probabilities": {"a": 0.1, "b": 0.9}}],
                                   as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert failed and lines == ["'in/new\\nline.jpg': a  (a 0.750  b 0.250)", "'in/bad\\r.jpg': error: not an image",
                                "in/plain name.jpg: b  (a 0.100  b 0.900)"]
