"""The one way a command line runs: arguments parsed first, then the work, and every known
failure turned into one line and an exit code."""
import contextlib
import errno
import importlib.util
import os
import re
import sys
import tempfile
import threading
import traceback

from acquisition.storage import op_error_line, url_failure
from cluster.isolation import with_network_advice
from cluster.tf_config import names_an_evaluator, read_tf_config
from pipeline.errors import USER_ERRORS
from pipeline.flags import build_parser
from pipeline.gpu_visibility import CUDA_VISIBLE, narrow_visible_gpus
from pipeline.out_of_memory import out_of_memory_message
from pipeline.settings import Settings
from pipeline.signals import Interrupted, stop_at_once
from pipeline.stdout import silence_stdout, stdout_closed, stdout_file_on_full_disk

_MISMATCH = ("Restoring from checkpoint failed", "not in the checkpoint", "not found in checkpoint")
# Set to 1 to see the Python traceback behind a one-line error (for bug reports).
TRACEBACK_VARIABLE = "PIPELINE_TRACEBACK"


def run_command(parser, work, argv=None, parse=None):
    """Parses `argv` with `parser` (or `parse(parser, argv)`), calls `work(args)` and returns
    the exit code: work's return value, or 0.

    The parser and its types import no TensorFlow and `work` imports it, so --help
    and a bad flag (exit 2) answer at once. Known errors end in one line on stderr
    naming the problem and the fix, exit 1; a stop signal (pipeline.signals) in one line saying
    what was saved, exit 128 + the signal. Checkpoints and results already written stay.
    """
    args = parse(parser, argv) if parse else parser.parse_args(argv)
    set_tensorflow_environment(args)
    model_dir = getattr(args, "model_dir", None)
    try:
        with stop_at_once(), _thread_file_failures_left_to_the_run(args):
            return work(args) or 0
    except USER_ERRORS as e:
        message, code = with_network_advice(str(e)), getattr(e, "exit_code", 1)
        _show_traceback(e)
    except Interrupted as e:
        with contextlib.suppress(OSError):  # a hung-up terminal's stderr fails (EIO): the exit code still tells
            print(f"{parser.prog}: {_interrupted_message(e, model_dir)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C in a tool that does not catch stop signals itself
        print(f"{parser.prog}: stopped by SIGINT", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        if stdout_closed():  # `... | head`: whatever reads the output has stopped reading
            silence_stdout()
            message = ("stopped: the program reading this output closed it (a pipe into head, say); "
                       "send the output to a file instead (> out.txt), or read it all")
        else:  # another pipe or socket: a download's, a subprocess's
            message = _io_failure(e.errno, e.strerror or str(e), e.filename, args)
            _show_traceback(e)
        code = 1
    except OSError as e:  # writing results, an export's assets, a download, a conversion; stdout's file
        message, code = _stdout_failure(e, args) or _io_failure(e.errno, e.strerror or str(e), e.filename, args), 1
        _show_traceback(e)
    except ModuleNotFoundError as e:
        message, code = _missing_package(e), 1
        if message is None:  # one of this project's own modules: a bug, not the environment
            raise
        _show_traceback(e)
    except Exception as e:  # noqa: BLE001 - TensorFlow's errors, told apart below
        # A full disk is a ResourceExhaustedError too: the file's failure is read first.
        message, code = _tensorflow_failure(e, args) or out_of_memory_message(e, args), 1
        if message is None:
            raise
        _show_traceback(e)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return code


def _either(flags):
    """Returns '--a', '--a or --b', '--a, --b or --c'."""
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"


# What TensorFlow reads when it is imported, unless the environment says otherwise. Its oneDNN kernels:
# TensorFlow 2.15 turns them on by itself only on CPUs with AVX-512 VNNI, BF16 or AMX, and on an AMD EPYC
# with AVX2 alone they trained the Fashion CNN 1.5x and VGG16 1.15x faster than its Eigen kernels
# (docs/benchmarks.md, "A CPU without AVX-512").
TENSORFLOW_DEFAULTS = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def set_tensorflow_environment(args, gpus=None, cpu_replicas=None):
    """Sets what TensorFlow reads from the environment once, when it is imported, for a job's
    `args` (run_command calls it; a tool whose parsed arguments hold a job's calls it too, with the `gpus` and
    `cpu_replicas` it trains on where its own flags say them)."""
    for name, value in TENSORFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)
    # (Under --cluster slurm with no GPUs allotted, Slurm's resolver shares the node's GPUs among its tasks
    # first: pipeline.cluster_run narrows each task's share then.)
    if not (getattr(args, "cluster", None) == "slurm" and CUDA_VISIBLE not in os.environ):
        narrow_visible_gpus(gpus if gpus is not None else getattr(args, "gpus", None),
                            cpu_replicas if cpu_replicas is not None else getattr(args, "cpu_replicas", None),
                            evaluator=names_an_evaluator())
    # Its C++ start-up chatter (in 2.15 even harmless "Unable to register cuDNN factory"
    # errors) hides the job's own lines; --verbose shows its warnings and errors.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if getattr(args, "verbose", False) else "3")
    xla_flags = os.environ.get("TF_XLA_FLAGS", "")
    if getattr(args, "xla", False) and "--tf_xla_cpu_global_jit" not in xla_flags:
        # Without it XLA auto-clusters only GPU graphs (see pipeline.estimator.session_config).
        os.environ["TF_XLA_FLAGS"] = f"{xla_flags} --tf_xla_cpu_global_jit".strip()


# The module names of requirements.txt's packages where they differ from the package's name.
_MODULE_OF_PACKAGE = {"pillow": "PIL", "pyyaml": "yaml", "pytest-xdist": "xdist"}


def _missing_package(error):
    """Returns the one line for a package of requirements.txt this Python lacks altogether (a script run
    as `scripts/x.py` by the system's Python, say), or None: a module of this project, of a package not
    required, or inside an installed one (another version of it) is a bug to show."""
    package = (error.name or "").split(".")[0]
    if not package or importlib.util.find_spec(package) is not None or package not in _required_modules():
        return None
    return (f"this Python ({sys.executable}) has no {package} module; run the command through "
            "scripts/in_venv.sh (it installs requirements.txt into .venv/ the first time), or activate .venv/")


def _required_modules():
    """Returns the top-level module names of the packages requirements.txt lists."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "requirements.txt")
    try:
        with open(path) as f:
            names = [re.split(r"[<>=!~\[; ]", line.strip(), 1)[0].lower() for line in f]
    except OSError:
        return set()
    return {_MODULE_OF_PACKAGE.get(name, name.replace("-", "_")) for name in names if name and name[0] != "#"}


def _show_traceback(error):
    """Prints `error`'s traceback to stderr when TRACEBACK_VARIABLE is set (to anything but 0)."""
    if os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0"):
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def train_main(task, argv=None):
    """Runs a training script's command line for `task`; returns the exit code."""
    return run_command(build_parser(task), lambda args: _train(task, args), argv)


def _train(task, args):
    # The flags' checks that need no data (roles.run makes them again, for its callers in Python) answer
    # before TensorFlow's import, which takes seconds.
    task.check(Settings.from_args(args))
    from pipeline import roles  # imports TensorFlow: only once the arguments are known good
    roles.run(task, args)


def _tensorflow_failure(error, args):
    """Returns the one line for a TensorFlow runtime error that comes from the files a run reads
    or writes (not from a bug), or None."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    if isinstance(error, RuntimeError):  # a summary writer's flush (EventFileWriter) says only this
        return _file_failure_in(str(error), args)
    if not isinstance(error, tf.errors.OpError):
        return None
    if _NO_SERVER in error.message:
        return _server_not_started()
    model_dir = getattr(args, "model_dir", None)
    failure = _file_failure_in(error.message, args)
    if failure:
        return failure
    # Saver.restore's words for a checkpoint of another graph: other shapes, or other variables
    # (a loss-scaling optimizer's under --precision fp16, say).
    if any(words in error.message for words in _MISMATCH):
        detail = next((line for line in error.message.splitlines()
                       if "shape" in line.lower() or "not found in checkpoint" in line), "")
        # The flags of this job that shape its graph (--optimizer: its slots; a checkpoint of step 0, killed before
        # step 1 was recorded, is resumed with no recipe to compare).
        shaping = [f"--{dest.replace('_', '-')}" for dest in ("model", "trainable_layers", "precision", "image_size",
                                                              "optimizer") if hasattr(args, dest)]
        return (f"the checkpoint in {model_dir} does not fit the model these flags build"
                f"{f' ({detail.strip()[:200]})' if detail else ''}; resume with the flags it was trained "
                f"with (the same {_either(shaping or ['--precision'])}, say), or pass another --model-dir")
    url = _URL.search(error.message)
    if url:  # a file system reached by URL (gs://...): its errors carry no errno, but their class tells
        return _io_failure(_TF_ERROR_NUMBERS.get(type(error).__name__), url_failure(url.group(0), error.message),
                           None, args)
    if isinstance(error, tf.errors.DataLossError) and any(w in error.message for w in _DAMAGED_RECORD):
        records = getattr(args, "records_dir", None)
        from acquisition.shards import MANIFEST  # TensorFlow is loaded: the error is its own
        # A shard of the size it was written is reused by a preparation: its manifest must go first.
        fix = (f"remove {os.path.join(records, MANIFEST)}, then make the shards of --records-dir {records} "
               f"again (scripts/prepare_oct.py --out {records}, with the --image-size they were made at)" if records
               else "remove the prepared shards it reads (the data dir's tfrecords folder) to have them made again")
        return f"a TFRecord file this run reads is cut short or damaged ({op_error_line(error)}); {fix}"
    if isinstance(error, (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError)):
        return op_error_line(error)
    from acquisition.undecodable import is_decode_failure  # TensorFlow is loaded: the error is its own
    if is_decode_failure(error):
        return _undecodable_image(error, args)
    return None


_NO_SERVER = "Could not start gRPC server"  # TensorFlow's words when a cluster task cannot listen on its port


def _server_not_started():
    """Returns the one line for a cluster task whose TensorFlow server could not listen on its address."""
    try:
        task = read_tf_config()
        address = task.addresses[task.task_type][task.index]
        named = f"TF_CONFIG gives {task.task_type} {task.index} the address {address}"
    except Exception:  # noqa: BLE001 - the line names what it can
        named = "TF_CONFIG names this task's address"
    return (f"this task's TensorFlow server could not listen on its port ({named}): another process holds that "
            "port, or the host is not this machine's; free the port or give the task another (--slurm-port-base "
            "under --cluster slurm), then run the same command")


_SUMMARY_WRITER_THREAD = "EventLoggerThread"  # TensorFlow's EventFileWriter's thread (event_file_writer.py)


@contextlib.contextmanager
def _thread_file_failures_left_to_the_run(args):
    """Keeps the traceback of a thread's failed write (TensorFlow's EventLoggerThread on a full disk) off
    stderr: the thread's writer raises it again in the main thread, whose one line says what failed."""
    previous = threading.excepthook

    def hook(failure):
        if not (getattr(failure.thread, "name", None) == _SUMMARY_WRITER_THREAD
                and isinstance(failure.exc_value, (OSError, RuntimeError))
                and _file_failure_in(str(failure.exc_value), args)):
            previous(failure)
    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def _file_failure_in(message, args):
    """Returns the one line for a failed file operation that a line of `message` tells of by its
    words (_TF_IO_WORDS), or None."""
    for line in message.splitlines():
        words = next((words for words in _TF_IO_WORDS if words in line
                      and not (words == _NOT_A_FOLDER and _URL.search(line))), None)  # (a URL's: see below)
        if words is not None:
            path = _PATH.search(line)
            what = line.strip() if words == _NOT_A_FOLDER and not path else words  # (it names a relative path)
            return _io_failure(_TF_IO_WORDS[words], what, path.group(0) if path else None, args)
    return None


def _undecodable_image(error, args):
    """Returns the one line for an image TensorFlow could not decode mid-run (its headers had read well),
    naming it: every image of the run's folders is decoded to find it, and the model dir remembers it (see
    pipeline.undecodable; a stop signal or a failure of that search gives the line without the name)."""
    from pipeline import undecodable
    cause = op_error_line(error)
    unnamed = (f"an image could not be decoded ({cause}), though its header reads well; find and replace it, then "
               "run the same command again")
    job = args[-1] if isinstance(args, tuple) else args  # a tool's: its own flags and its job's
    try:
        with stop_at_once():
            found, record = undecodable.find_and_remember(job, cause)
    except (KeyboardInterrupt, Interrupted, Exception):  # noqa: BLE001 - the search only names the file
        return unnamed
    if not found:
        return unnamed
    return undecodable.failure_line(found, record, getattr(job, "on_bad_image", None))


_DAMAGED_RECORD = ("truncated record", "corrupted record", "Read less bytes than requested")


# What to do about a failed file operation, by its errno; {flag} is the flag naming the path.
_IO_ADVICE = {
    errno.ENOSPC: "the disk is full: free some space on it, or pass another {flag}",
    errno.EDQUOT: "your disk quota is used up: free some space, or pass another {flag}",
    errno.EFBIG: "a file grew past the size limit (ulimit -f, or the file system's): raise it, or pass another "
                 "{flag}",
    errno.EACCES: "you have no permission there: fix the permissions, or pass another {flag}",
    errno.EPERM: "the operation is not permitted there: fix the permissions, or pass another {flag}",
    errno.EROFS: "that file system is read-only: pass another {flag} on a writable one",
    errno.ENOENT: "a folder on that path is missing or cannot be made there: create it, or pass another {flag}",
    errno.ENOTDIR: "a part of that path is a file, not a folder: move that file away, or pass another {flag}",
    errno.EISDIR: "that path is a folder where a file is needed: pass another {flag}",
    errno.EIO: "the disk reported an input/output error: check the disk, or pass another {flag}",
    errno.EMFILE: "the process has too many files open: raise its limit (ulimit -n) and run again",
}
_WRITES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}  # failures only a write meets
# TensorFlow's errors on a URL's file system, by class, mapped to the errno whose advice fits.
_TF_ERROR_NUMBERS = {"PermissionDeniedError": errno.EACCES, "UnauthenticatedError": errno.EACCES,
                     "NotFoundError": errno.ENOENT, "ResourceExhaustedError": errno.ENOSPC}
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\",;)]+")
# TensorFlow's file errors carry no errno: their words, mapped to one.
_NOT_A_FOLDER = "is not a directory"  # (a file where the run makes a folder: <model dir>/export, say)
_TF_IO_WORDS = {"No space left on device": errno.ENOSPC, "File too large": errno.EFBIG,
                "Disk quota exceeded": errno.EDQUOT, "Read-only file system": errno.EROFS,
                "Too many open files": errno.EMFILE, _NOT_A_FOLDER: errno.ENOTDIR}
# The local file a TensorFlow file error names, where it names one (not a URL's path).
_PATH = re.compile(r"(?<![\w:/.])/[^\s;,'\"]+")


def _io_failure(error_number, what, filename, args):
    """Returns the one line for a failed file operation: what failed, where, and the advice that fits
    its errno, naming the flag whose path it is; a failure in the model dir adds how to resume."""
    where = f" ({filename})" if filename else ""
    flag = _flag_of_path(args, filename) if filename else None
    if flag is None and error_number in _WRITES and filename and _in_temporary_folder(filename):
        # (a write no flag's path holds: an export for a bucket is made there first)
        flag = f"TMPDIR (the temporary folder, now {tempfile.gettempdir()})"
    advice = _IO_ADVICE.get(error_number, "fix that path, or pass another {flag}").format(
        flag=flag or "folder")
    message = f"{'a write' if error_number in _WRITES else 'a file operation'} failed: {what}{where}; {advice}"
    model_dir = getattr(args, "model_dir", None)
    if model_dir and (flag == "--model-dir" or not filename):  # a TensorFlow error names no path
        message += (f"; then run the same command: it resumes from the latest whole checkpoint in {model_dir}, "
                    "and the next run removes what this one left half-written")
    return message


def _stdout_failure(error, args):
    """Returns the one line for a failed write to the file stdout goes to, on a full disk (stdout is
    pointed at /dev/null then: Python would flush it again at exit), or None."""
    path = stdout_file_on_full_disk(error)
    if path is None:
        return None
    silence_stdout()
    model_dir = getattr(args, "model_dir", None)
    resume = f"; then run the same command (it resumes from {model_dir}'s latest checkpoint, if any)" if model_dir \
        else ""
    return (f"writing the output to {path} failed: {error.strerror}; free some space on its disk, or send the "
            f"output to a file on another disk{resume}")


def _flag_of_path(args, path):
    """Returns the flag (`--data-dir`, say) whose path holds `path` or is made under it, or None."""
    path = os.path.abspath(path)
    best = None
    namespaces = args if isinstance(args, tuple) else (args,)  # a tool's: its own and its job's
    for name, value in (item for ns in namespaces if hasattr(ns, "__dict__") for item in vars(ns).items()):
        if not isinstance(value, str) or not value or "://" in value:
            continue
        value = os.path.abspath(os.path.expanduser(value))
        if os.path.commonpath([path, value]) in (path, value) and (best is None or len(value) > len(best[1])):
            best = (name, value)
    return f"--{best[0].replace('_', '-')}" if best else None


def _in_temporary_folder(path):
    """Returns whether the local `path` is under the temporary folder (TMPDIR's, or /tmp)."""
    folder = os.path.abspath(tempfile.gettempdir())
    return os.path.commonpath([os.path.abspath(path), folder]) == folder


def _interrupted_message(interrupted, model_dir):
    if not model_dir:  # a tool's
        return str(interrupted)
    if interrupted.saved_at_step is not None:
        return (f"{interrupted} at global step {interrupted.saved_at_step}; checkpoint saved in {model_dir}: "
                "run the same command to resume")
    tf = sys.modules.get("tensorflow")
    latest = tf.train.latest_checkpoint(model_dir) if tf and model_dir else None
    if latest:
        return (f"{interrupted}; the latest checkpoint, {os.path.basename(latest)}, is kept in {model_dir}: "
                "run the same command to resume")
    return f"{interrupted} before any checkpoint was written"
