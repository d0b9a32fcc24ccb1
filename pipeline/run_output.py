"""What a run prints: the header before training and the summary after it."""
import contextlib
import logging
import os
import unicodedata

from acquisition import storage
from models import SGD_MOMENTUM
from pipeline import determinism, mfu as mfu_lib, mixing, results as results_lib, tta
from pipeline.flag_types import names_text
from pipeline.flags.tta import tta_text
from pipeline.stdout import silence_stdout
from pipeline.training_record import describe_trainable_layers, trainable_layers_of
from pipeline.validation.early_stopping import early_stopping_of
from reporting import calibration, files as report_files


log = logging.getLogger(__name__)


@contextlib.contextmanager
def reader_may_leave(results_path):
    """Ends the printing of a finished run quietly when the program reading stdout has closed it (`... | head`):
    the run is whole and `results_path` holds its results, which a warning on stderr names."""
    try:
        yield
    except BrokenPipeError:
        silence_stdout()
        log.warning("the program reading this output closed it before the summary was printed; the run finished, "
                    "and %s holds its results", results_path)


def print_header(setup, cadence=None):
    """Prints the run's settings (`setup`, a pipeline.run_setup.RunSetup, and the validation's
    `cadence`, a pipeline.validation.cadence.Cadence or None) before training."""
    task, args, plan, data, steps = setup.task, setup.settings, setup.plan, setup.data, setup.steps
    scaling = (f"{args.learning_rate:g} x {setup.global_batch}/{args.reference_batch_size}, linear scaling"
               if args.lr_scaling == "linear" else "not scaled with the batch")
    resume = (f"resuming from step {steps.start_step}" if steps.start_step else
              f"starting from the weights of {setup.initial_weights.describe()} (--init-from)"
              if setup.initial_weights else "starting from scratch")
    validation = (f" / {data.num_validation_examples:,} validation" if getattr(data, "num_validation_examples", 0)
                  else "")
    print(f"{task.name}: {data.source} data, {data.num_train_examples:,} training{validation} / "
          f"{data.num_eval_examples:,} test images\n"
          f"{_describe_classes(data.class_names)}"
          f"{_describe_channels(data.report)}"
          f"{_describe_model(setup)}"
          f"  devices:       {plan.description}\n"
          f"  {'eval batch:' if args.eval_only else 'batch:':<15}{args.batch_size} per replica x {plan.replicas} "
          f"replica(s) = {setup.global_batch} global\n"
          f"  precision:     {_describe_precision(args)}\n"
          f"{_describe_augment(args)}"
          f"{mixing.header_line(args)}"
          f"{determinism.header_line(setup)}"
          f"{tta.header_line(args)}"
          f"{_describe_training(setup, scaling, resume)}"
          f"  model dir:     {args.model_dir}"
          + (f"\n  validation:    {cadence.describe()}" if cadence and not args.eval_only else "")
          + (f"\n  early stop:    {_describe_early_stop(args)}" if cadence and not args.eval_only and
             (args.patience or args.stop_at_accuracy is not None) else "")
          + (f"\n  recipe:        {data.recipe}" if data.recipe else "")
          + (f"\n  ema:           weights averaged with decay {args.ema:g} after every step; evaluations and the "
             "export use the average" if args.ema else ""), flush=True)


def _describe_classes(class_names, shown=12):
    """Returns the header's line naming the classes in label order (the first `shown` of more), or ''."""
    if not class_names:
        return ""
    names = ", ".join(f'"{name}"' if "," in name or name != name.strip() else name  # 'a, b' is one; ' a' has a space
                      for name in class_names[:shown])
    names += f", ... ({len(class_names)} in all)" if len(class_names) > shown else ""
    return f"  classes:       {names}\n"


def _describe_model(setup):
    """Returns the header's line on the network trained: --model (or the task's own network), where its weights
    come from (a resumed run's or an --eval-only's: its checkpoint) and which of its backbone's layers train;
    '' for a job without --weights (Fashion's one CNN)."""
    args = setup.settings
    if not hasattr(args, "weights"):
        return ""
    name = getattr(args, "model", None) or setup.task.network
    weights = ("every weight from --init-from's checkpoint" if setup.initial_weights else
               "the weights of its checkpoint" if setup.steps.start_step or args.eval_only else  # (resumed)
               "random weights (--weights none)" if args.weights == "none" else
               "ImageNet weights" if args.weights == "imagenet" else f"the weights of {args.weights}")
    layers = trainable_layers_of(args)
    trainable = ("every layer trainable" if layers == "all" else "the head only trainable" if layers == 0 else
                 "the head and the backbone's last layer trainable" if layers == 1 else
                 f"the head and the backbone's last {layers} layers trainable")
    return f"  model:         {name}, {weights}, {trainable}\n"


def _describe_channels(report):
    """Returns the header's line on the channels the images job decodes to and why (its data's `report`),
    or '' for a job that does not choose."""
    if report.get("channels") is None:
        return ""
    return f"  channels:      {report['channels']} ({report.get('channels_reason')})\n"


def _describe_training(setup, scaling, resume):
    """Returns the header's lines on what trains: the rate, the steps and the images; under --eval-only, that
    nothing does."""
    steps = setup.steps
    if setup.settings.eval_only:
        return (f"  steps:         none trained (--eval-only): the best checkpoint validation kept, else the "
                f"latest (step {steps.start_step}), is evaluated\n")
    return (f"  learning rate: {setup.schedule.base_rate:g} ({scaling}), {setup.schedule.describe()}\n"
            f"{_describe_optimizer(setup.settings)}"
            f"  steps:         to global step {steps.max_steps}, {resume}\n"
            f"  images:        {_describe_images(steps, setup.data.num_train_examples)}\n")


def _describe_optimizer(args):
    """Returns the header's optimizer line, or '' for the default (Adam without weight decay)."""
    if args.optimizer == "adam" and not args.weight_decay:
        return ""
    name = "Adam" if args.optimizer == "adam" else f"SGD with Nesterov momentum {SGD_MOMENTUM:g}"
    decay = (f", decoupled weight decay {args.weight_decay:g} (kernels x (1 - rate x {args.weight_decay:g}) each step)"
             if args.weight_decay else "")
    return f"  optimizer:     {name}{decay}\n"


def _describe_early_stop(args):
    return early_stopping_of(args).describe()


def _describe_images(steps, num_train_examples):
    def epochs(images):
        return f"{images / num_train_examples:.3g} epochs"
    left = steps.images_at_end - steps.images_at_start
    in_steps = f"in {steps.max_steps - steps.start_step} steps of {steps.global_batch}"
    if not steps.start_step:
        return f"{left:,} ({epochs(left)} of {num_train_examples:,}) {in_steps}"
    target = (f" of the {steps.target_images:,} asked ({epochs(steps.target_images)})"
              if steps.target_images is not None else "")
    return (f"{steps.images_at_start:,} trained ({epochs(steps.images_at_start)}); {left:,} to train "
            f"({epochs(left)}) {in_steps}{target}")


def _describe_augment(args):
    if not args.augment:
        return ""
    transforms = ", ".join(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                           for name, value in args.augment)
    return (f"  augment:       {transforms} (training batches only, drawn from seed {args.seed or 0}, the step "
            "and the replica)\n")


def _describe_precision(args):
    described = {"fp32": "fp32", "bf16": "bf16 (float32 variables, bfloat16 math, float32 softmax and loss)",
                 "fp16": "fp16 (float32 variables, float16 math, dynamic loss scaling)",
                 "bf16-amp": "bf16-amp (a float32 model; TensorFlow's oneDNN rewrite runs its eligible ops in "
                             "bfloat16)"}[args.precision]
    if getattr(args, "precision_requested", None) == "auto":
        described += f", picked by --precision auto: {args.precision_reason}"
    extras = (["XLA"] if args.xla else []) + [f"{n} {kind}-op threads" for kind, n in
                                              (("intra", args.intra_op_threads), ("inter", args.inter_op_threads)) if n]
    if getattr(args, "conv_gradients", None) == "matmul":
        reason = getattr(args, "conv_gradients_reason", None)
        extras.append("wide convolutions' weight gradients as matmuls"
                      + (f" (--conv-gradients auto: {reason})" if reason else ""))
    return described + (f"; {', '.join(extras)}" if extras else "")


def print_summary(results, path):
    """Prints the summary of `results` (results.json's dict, written to `path`)."""
    if results["train_images_per_sec"] is not None:
        train = (f"{results['train_images_per_sec']:.1f} images/sec "
                 f"(+/- {results['train_images_per_sec_std']:.1f}) over {results['timed_steps']} timed steps, "
                 f"{results['train_seconds']:.1f} s in train()" + mfu_lib.describe_mfu(results))
    else:
        train = "no steps timed in this run"
    trained = (f"  images:  {results['images_trained']:,} trained, {results['epochs_trained']:g} epochs\n"
               if "images_trained" in results else "")
    best = results.get("best")
    # (The seconds are this run's: none when it only wrote the report of validations made before.)
    before = any(e.get("step", 0) <= results.get("start_global_step", 0) for e in results["evaluations"])
    seconds = (f" ({results['validation_seconds']:.1f} s{' in this run' if before else ''})"
               if results.get("validation_seconds") else "")
    validation = (f"  valid.:  best accuracy {best['validation_accuracy']:.4f} at step {best['step']} of "
                  f"{len(results['evaluations'])} evaluation{'' if len(results['evaluations']) == 1 else 's'} on "
                  f"{results['validation_examples']} images"
                  f"{seconds}; stopped: {results['stopped_because']}\n" if best else "")
    chosen = f" (the best checkpoint, step {results['eval_step']})" if best else ""
    ended = (f"evaluated at global step {results['global_step']}, where training stopped short of its planned "
             f"{results['max_steps']} (the training command goes on from there)" if results.get("stopped_because") == "unfinished"
             else f"finished at global step {results['global_step']}")
    print(f"{results['task']}: {ended}\n"
          f"  train:   {train}\n{trained}{validation}"
          f"  eval:    accuracy {results['eval_accuracy']:.4f}, loss {results['eval_loss']:.4f} "
          f"on {results['eval_examples']} test images{chosen}"
          + (f"\n           test-time augmentation: {tta.describe(results['tta'])}" if results.get("tta") else ""),
          flush=True)
    if results.get("ema"):
        print(_describe_ema(results["ema"]), flush=True)
    for line in per_class_lines(results):
        print(line)
    if results.get("skipped_files"):
        print(f"  skipped: {len(results['skipped_files'])} files that cannot be decoded "
              "(listed with their problems in results.json)")
    if results.get("export_dir"):
        print(f"  export:  {results['export_dir']}")
    tflite = _tflite_now(results)
    if tflite:  # the export for devices: a line per .tflite file, and any warning
        from serving.tflite import summary_lines
        print("\n".join(summary_lines(tflite)))
    print(f"  results: {path}", flush=True)


def _tflite_now(results):
    """Returns the record of the .tflite files of `results`' export as they are now (serving.tflite.current_record):
    the training run's, or those an --eval-only --tflite converted later beside an export the run made without
    them; None when there are none."""
    if not results.get("tflite") and not results.get("export_dir"):
        return None
    from serving.tflite import current_record, output_dir
    record = current_record(results.get("tflite") or {"dir": output_dir(results["export_dir"])})
    return record if record.get("files") else None


def _interval(figure):
    value, ci = figure["value"], figure["ci"]
    return "n/a" if value is None else f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _ece(figure):
    """Returns ECE as measured, then bias-corrected with its interval (see reporting.bootstrap)."""
    if figure["value"] is None or figure.get("bias_corrected") is None:
        return _interval(figure)
    return f"{figure['value']:.3f}, bias-corrected {_interval({**figure, 'value': figure['bias_corrected']})}"


def _calibration_line(figures):
    """Returns the headline's line of the report's 'calibration' object; with a temperature, the test NLL
    before and after it, and a warning when the scaling made the test NLL worse."""
    scaling = figures.get("temperature")
    line = (f"           calibration: ECE {_ece(figures['ece'])} ({figures['bins']['used']} equal-count bins), "
            f"NLL {figures['nll']['value']:.3f}, Brier {figures['brier']['value']:.3f}")
    if not scaling:
        return line
    before, after = scaling["test_nll"]["before"], scaling["test_nll"]["after"]
    line += (f"; temperature {scaling['temperature']:.3f}, fitted on the {scaling['validation_images']} validation "
             f"images (test NLL {before:.3f} before it)")
    if after > before:
        line += (f"\n           WARNING: the temperature made the test NLL worse ({before:.3f} to {after:.3f}), and "
                 "the calibrated export serves its probabilities: the validation split is too small or too easy to "
                 "fit on; hold out more (--validation-fraction), or drop --calibrate")
    if scaling.get("at_bound"):
        low, high = calibration.TEMPERATURE_BOUNDS
        line += (f"\n           WARNING: the temperature lies at a bound of its search ({low:g} to {high:g}): the "
                 "validation probabilities are far from calibrated or carry next to no information, and the "
                 "calibrated export serves them so; see report.md")
    return line


def print_report_headline(results, folder):
    """Prints the clinical report's accuracy, referral and calibration figures with their intervals, if results
    has one, and the path of its report.md in `folder`."""
    report = results.get("clinical")
    if not report:
        return
    boot = report["bootstrap"]
    lines = [f"  report:  accuracy {_interval(report['accuracy'])} (95% bootstrap interval, {boot['resamples']} "
             f"resamples of {boot['groups']} {'groups' if boot['unit'] == 'group' else 'images'})"]
    referral = report.get("referral")
    if referral and referral.get("sensitivity"):
        auc = _interval(referral["auc"]) if referral["auc"] else "n/a"
        lines.append(f"           referral {'+'.join(referral['positive_classes'])}: sensitivity "
                     f"{_interval(referral['sensitivity'])}, specificity "
                     f"{_interval(referral['specificity']) if referral['specificity'] else 'n/a'}, AUC {auc}")
    if report.get("calibration"):
        lines.append(_calibration_line(report["calibration"]))
    lines.append(f"           {storage.join(folder, report_files.REPORT_MD)}")
    print("\n".join(lines), flush=True)


def per_class_lines(results):
    """Returns the summary's lines of `results`' per-class precision and recall, in class order, their figures
    in one column however wide the names' characters."""
    per_class = results.get("per_class", {})
    # In class order: results.json's keys are sorted (a finished run's results are printed from it).
    order = [n for n in (results.get("clinical") or {}).get("class_names", ()) if n in per_class]
    order += sorted(set(per_class) - set(order))
    width = max(map(_columns, per_class), default=8)
    lines = []
    for name, figures in ((n, per_class[n]) for n in order):
        precision, recall = (f"{v:.3f}" if v is not None else "n/a"
                             for v in (figures["precision"], figures["recall"]))
        lines.append(f"           {name}{' ' * (width - _columns(name))} precision {precision}  recall {recall}  "
                     f"({figures['support']} image{'' if figures['support'] == 1 else 's'})")
    return lines


def _columns(text):
    """Returns the terminal columns `text` takes: two for each wide character (Chinese, Japanese, most emoji)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _describe_ema(ema):
    """Returns the summary's line on results.json's `ema`: the final step's averaged and raw test figures."""
    averaged, raw = ema["averaged"], ema["raw"]
    return (f"  ema:     decay {ema['decay']:g}, final step {ema['step']}: averaged weights accuracy "
            f"{averaged['accuracy']:.4f}, loss {averaged['loss']:.4f}; raw weights accuracy {raw['accuracy']:.4f}, "
            f"loss {raw['loss']:.4f}")


def finished_results(model_dir, step, max_steps, settings, stopped_because=None, recipe_differs=(),
                     unconvertible=False):
    """Returns the results of the run that finished at `step` in `model_dir` (re-printed, with a note of
    the model flags in `settings` it was not trained with, and of `recipe_differs`: the recipe's, see
    training_record.recipe_not_trained_with; `unconvertible`: an --eval-only run would refuse --tflite, see
    training_record.eval_only_cannot_convert), or None; with `stopped_because`, only when they say it
    stopped early for that reason."""
    try:
        results = results_lib.read_results(model_dir)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # (damaged: written whole, so by a disk fault or a hand)
        log.warning("%s cannot be read (%s): the run's test report is made again from its best checkpoint, and "
                    "the training figures it held (images/sec, MFU of the runs before) are lost",
                    os.path.join(model_dir, results_lib.RESULTS_FILE), getattr(e, "strerror", None) or e)
        return None
    if not isinstance(results, dict) or results.get("global_step") != step \
            or (stopped_because and results.get("stopped_because") != stopped_because):
        return None
    results = results_lib.recorded_here(results, model_dir)
    past = f", past the final step {max_steps} these flags ask for (training cannot go back)" if step > max_steps else ""
    with reader_may_leave(os.path.join(model_dir, results_lib.RESULTS_FILE)):
        print(f"{results['task']}: already finished at global step {step} (on {results.get('finished_at')}){past}; "
              "nothing to do. Its results:", flush=True)
        differing = flags_not_trained_with(results, settings) + list(recipe_differs)
        if differing:
            print(f"  note: it was trained with {', '.join(differing)}: these results are not of this command's "
                  "flags; pass another --model-dir to train with them", flush=True)
        tflite_refused = unconvertible and bool(getattr(settings, "tflite", ()))
        unapplied = finishing_flags_not_applied(results, settings, convertible=not tflite_refused)
        if unapplied:
            print(f"  note: {'; '.join(unapplied)}: these act when a run finishes, and this one finished with other "
                  "values; run again with --eval-only to apply them to its best checkpoint", flush=True)
        if tflite_refused:
            print(f"  note: --tflite {','.join(settings.tflite)}: the model its --eval-only would convert trained in "
                  "bf16, whose bfloat16 tensors TFLite cannot hold, so no --eval-only converts it; train another "
                  "--model-dir with --precision fp32 or bf16-amp to convert one", flush=True)
        print_summary(results, os.path.join(model_dir, results_lib.RESULTS_FILE))
        print_report_headline(results, model_dir)
    return results


def finishing_flags_not_applied(results, settings, convertible=True):
    """Returns ['--tta flip=horizontal (it finished with none)', ...]: the flags that act when a run finishes
    (--tta, --calibrate, --tflite, --positive-classes and --at-specificity: the test report and the exports)
    given in `settings` with other values than the finished run's `results` record. The two whose defaults
    are values (the referral decision's) count only when the command line gives them; --tflite only when
    the run is `convertible` (an --eval-only run could apply it)."""
    clinical = results.get("clinical") or {}
    referral = clinical.get("referral") or {}
    had = {"tta": tuple(results.get("tta") or ()),
           "calibrate": "temperature" if (clinical.get("calibration") or {}).get("temperature") else "none",
           "tflite": tuple(sorted((results.get("tflite") or {}).get("files", {}))),
           "positive_classes": tuple(referral.get("positive_classes") or ()),
           "at_specificity": (referral.get("at_specificity") or {}).get("target")}
    given = getattr(settings, "explicit_flags", ())

    def referral_flag(name, value):  # given, to a run that made a test report (not --synthetic data's)
        return value if name in given and clinical else None
    asked = {"tta": tuple(getattr(settings, "tta", ()) or ()), "calibrate": getattr(settings, "calibrate", "none"),
             "tflite": tuple(sorted(getattr(settings, "tflite", ()) or ())),
             "positive_classes": referral_flag("positive_classes",
                                               tuple(getattr(settings, "positive_classes", ()) or ())),
             # the operating point of a decision it made (else the classes' note says it all)
             "at_specificity": referral_flag("at_specificity", getattr(settings, "at_specificity", None))
             if had["positive_classes"] else None}
    texts = {"tta": tta_text, "tflite": lambda kinds: ",".join(kinds) or "none",
             "positive_classes": names_text}

    def applied(name, value):  # a conversion of more kinds holds the kinds asked now
        return set(value) <= set(had[name]) if name == "tflite" else value == had[name]
    return [f"--{name.replace('_', '-')} {texts.get(name, str)(value)} (it finished with "
            f"{texts.get(name, str)(had[name])})" for name, value in asked.items()
            if value not in ((), "none", None) and not applied(name, value)
            and (convertible or name != "tflite")]


def flags_not_trained_with(results, settings):
    """Returns ['--model vgg16 (not small_cnn)', ...]: the flags shaping the model (--model, the backbone's
    trainable layers, and a --precision given, not picked by auto) whose value in `settings` is not the one
    `results` record."""
    asked = {"model": getattr(settings, "model", None), "trainable_layers": trainable_layers_of(settings)}
    if getattr(settings, "precision_requested", "auto") != "auto":
        asked["precision"] = settings.precision
    return [f"{describe_trainable_layers(results[name])} (not {describe_trainable_layers(value)})"
            if name == "trainable_layers" else f"--{name} {results[name]} (not {value})"
            for name, value in asked.items() if value is not None and results.get(name) not in (None, value)]
