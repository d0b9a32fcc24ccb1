#!/usr/bin/env python
"""Classify images (JPEG, PNG, BMP, GIF; files or folders) with a model exported by a training run
(train_fashion.py, train_images.py, train_oct.py). A Fashion-MNIST model also takes raw pixels: a
file named *.gray holding exactly one 28x28 image's 784 bytes, one a pixel, row by row, as in the
IDX files (0 black, 255 white). Every job's export takes such raw pixels (at its image size and channels),
and so does a .tflite file converted from one (--tflite, docs/exports.md)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.flag_types import ArgumentParser, HelpFormatter, model_path, output_folder, positive_int  # noqa: E402
from pipeline.flags.tta import TTA_HELP, tta_views  # noqa: E402


def build_parser():
    """Returns the parser: the export, the images, and the output form."""
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", required=True, type=model_path,
                        help="a training run's model dir, or the export folder it printed, or the <model "
                             "dir>/export folder above it (the newest export there is used: the best model when "
                             "the run validated), or a .tflite file a run's --tflite wrote (its class_names.txt "
                             "beside it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per line instead of text")
    parser.add_argument("--explain", metavar="OUT_DIR", default=None, type=output_folder,
                        help="also write a Grad-CAM heatmap over each image, as OUT_DIR/<image>.gradcam.png: "
                             "where the model's last convolution looked for the predicted class")
    parser.add_argument("--explain-class", metavar="NAME", default=None,
                        help="with --explain: explain this class (one of the export's) instead of the predicted one")
    parser.add_argument("--batch-size", type=positive_int, default=64,
                        help="files read and classified at once (memory grows with it, not with the file count)")
    parser.add_argument("--tta", type=tta_views(), default=(), metavar="none|flip[=DIRECTION],crops",
                        help=TTA_HELP + " (from the image's pixels, through the export's pixels signature; 'flip' "
                                        "alone is horizontal here, whatever the job)")
    parser.add_argument("images", nargs="+",
                        help="image files to classify, or folders whose images (at any depth) are classified; "
                             "also *.gray files of one image's raw uint8 pixels at the model's size, row by row "
                             "(train_fashion.py's: exactly 784 bytes, 28x28 gray); any other file is an error "
                             "naming the fix")
    return parser


def predict(args):
    """Prints each image's class (named by the export's signature) and probabilities; returns the exit code."""
    if args.explain_class is not None and not args.explain:
        from pipeline.errors import FlagError
        raise FlagError("--explain-class needs --explain OUT_DIR, the folder the heatmaps go to")
    if args.explain and args.model.lower().endswith(".tflite"):
        from pipeline.errors import FlagError
        raise FlagError("--explain reads the gradients of the SavedModel export, which a .tflite file has not: "
                        "pass --model the export (or its model dir) to explain")
    # imports TensorFlow: once the arguments are good
    from serving.predict import classify_files, load_predictor, unfinished_run_note
    predictor = load_predictor(args.model)
    unfinished = unfinished_run_note(args.model, predictor.export_dir)
    if unfinished:
        print(f"{time.strftime('%H:%M:%S')} W {unfinished}", file=sys.stderr, flush=True)  # as the runs warn
    # The export that classifies, not --model's newest again: a run beside may have replaced its best since.
    gradcam = _gradcam(args, predictor.export_dir) if args.explain else None  # (--explain-class checked first)
    if args.tta:  # the mean over views of each image (serving.tta)
        from serving.tta import with_views
        predictor = with_views(predictor, args.tta)
    results = classify_files(predictor, args.images, args.batch_size, left_out_folder=args.explain)
    if args.tta:  # named in each answer, as results.json names them
        results = ({**r, "tta": list(args.tta)} if "error" not in r else r for r in results)
    if gradcam is not None:
        results = list(results)  # the heatmaps follow the predictions
        try:
            _explain(args, gradcam, results)
        except BaseException:  # a full disk, a stop: the predictions made are printed, not lost with the heatmaps
            _print(results, args.json)
            raise
    return 1 if _print(results, args.json) else 0


def _print(results, as_json):
    """Prints a line (or a JSON object) per entry of `results`; returns whether any is an error."""
    failed = False
    for r in results:
        failed = failed or "error" in r
        if as_json:
            print(json.dumps(r))
        elif "error" in r:
            print(f"{_one_line(r['file'])}: error: {r['error']}")
        else:
            spread = "  ".join(f"{n} {p:.3f}" for n, p in r["probabilities"].items())
            heatmap = f"  heatmap of {r['explained_class']}: {_one_line(r['heatmap'])}" if "heatmap" in r else ""
            print(f"{_one_line(r['file'])}: {r['class']}  ({spread}){heatmap}", flush=True)
    return failed


def _one_line(path):
    """Returns `path` as a line per file shows it: quoted and escaped when it holds a line break."""
    from acquisition.image_checks import has_line_break
    return repr(path) if has_line_break(path) else path


def _gradcam(args, export_dir):
    """Returns the GradCam of the export at `export_dir`; raises FlagError for an --explain-class it has not."""
    from pipeline.errors import FlagError
    from serving.gradcam import GradCam
    gradcam = GradCam(export_dir)
    if args.explain_class is not None and args.explain_class not in gradcam.class_names:
        gradcam.close()
        raise FlagError(f"--explain-class {args.explain_class} is not a class of this model; "
                        f"its classes are {', '.join(gradcam.class_names)}")
    return gradcam


def _explain(args, gradcam, results):
    from serving.gradcam import explain_files
    class_index = None if args.explain_class is None else gradcam.class_names.index(args.explain_class)
    explain_files(gradcam, results, args.explain, class_index)
    gradcam.close()


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), predict))
