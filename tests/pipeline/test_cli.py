"""The one line a failed file operation ends in: what failed, where, and advice that fits the error."""
import argparse
import errno
import json
import os
import tempfile
import types

import pytest

from pipeline.cli import run_command


def fail_with(error):
    parser = argparse.ArgumentParser(prog="job.py")
    parser.add_argument("--model-dir", default="/runs/m")
    parser.add_argument("--data-dir", default="/data/fashion")

    def work(args):
        raise error
    return parser, work


@pytest.mark.parametrize("number,path,expected", [
    (errno.ENOSPC, "/runs/m/model.ckpt-3.data", "a write failed: No space left on device (/runs/m/model.ckpt-3.data); "
                                                "the disk is full: free some space on it, or pass another --model-dir"),
    (errno.EACCES, "/data/fashion/tfrecords", "a file operation failed: Permission denied (/data/fashion/tfrecords); "
                                              "you have no permission there: fix the permissions, or pass another "
                                              "--data-dir"),
    (errno.EROFS, "/data/fashion", "a write failed: Read-only file system (/data/fashion); that file system is "
                                   "read-only: pass another --data-dir on a writable one"),
    (errno.ENOENT, "/data", "a file operation failed: No such file or directory (/data); a folder on that path is "
                            "missing or cannot be made there: create it, or pass another --data-dir"),
    (errno.ENOSPC, os.path.join(tempfile.gettempdir(), "tmpab12/export/variables"),  # a bucket's export, made here
     f"a write failed: No space left on device ({tempfile.gettempdir()}/tmpab12/export/variables); the disk is full: "
     f"free some space on it, or pass another TMPDIR (the temporary folder, now {tempfile.gettempdir()})"),
    (errno.ENOTDIR, "/elsewhere/x", "a file operation failed: Not a directory (/elsewhere/x); a part of that path is "
                                    "a file, not a folder: move that file away, or pass another folder"),
])
def test_advice_fits_the_error_and_names_the_flag_of_the_path(capsys, number, path, expected):
    parser, work = fail_with(OSError(number, os.strerror(number), path))
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"job.py: error: {expected}"), line
    # Only a failure in the model dir (or one with no path) says how to resume there.
    assert ("it resumes from the latest whole checkpoint in /runs/m" in line) == path.startswith("/runs/m"), line


def test_a_read_failure_in_the_model_dir_is_not_called_a_write(capsys):
    parser, work = fail_with(IsADirectoryError(errno.EISDIR, "Is a directory", "/runs/m/results.json"))
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err
    assert "a file operation failed: Is a directory (/runs/m/results.json); that path is a folder where a file " \
           "is needed" in line and "write" not in line


def test_a_graph_mode_error_is_told_by_its_cause_not_by_where_its_node_was_defined(capsys):
    import tensorflow as tf
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        try:  # a checkpoint restore of a file gone: the DataLoss and NotFound errors a run meets
            session.run(tf.raw_ops.RestoreV2(prefix="/gone/model.ckpt-7", tensor_names=["w"], shape_and_slices=[""],
                                             dtypes=[tf.float32]))
        except tf.errors.OpError as e:
            error = e
    assert error.message.startswith("Graph execution error:")
    parser, work = fail_with(error)
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("job.py: error: ") and "/gone/model.ckpt-7" in line, line


def test_a_failure_on_a_url_names_the_bucket_the_cause_and_the_advice_of_its_error_class(capsys):
    import tensorflow as tf
    parser, work = fail_with(tf.errors.PermissionDeniedError(
        None, None, "Error executing an HTTP request: HTTP response code 403 with body '...'\n\t when initiating an "
                    "upload to gs://shared-runs/m/model.ckpt-3_temp/part-00000-of-00001.data-00000-of-00001"))
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("job.py: error: a file operation failed: gs://shared-runs cannot be reached or written "
                           "(Error executing an HTTP request: HTTP response code 403 with body '...': no permission"), line
    assert "you have no permission there: fix the permissions" in line and "it resumes from the latest whole " \
        "checkpoint in /runs/m" in line and "\n" not in line


@pytest.mark.parametrize("words,advice", [
    ("No space left on device", "a write failed: No space left on device (/runs/m/model.ckpt-40_temp/part-00000-of-"
                                "00001.data-00000-of-00001.tempstate1); the disk is full: free some space on it, or "
                                "pass another --model-dir; then run the same command: it resumes"),
    ("Too many open files", "a file operation failed: Too many open files (/runs/m/events.out.tfevents.1); the "
                            "process has too many files open: raise its limit (ulimit -n) and run again"),
])
def test_a_file_error_tensorflow_raises_as_resources_exhausted_is_not_called_out_of_memory(capsys, words, advice):
    import tensorflow as tf
    path = ("/runs/m/model.ckpt-40_temp/part-00000-of-00001.data-00000-of-00001.tempstate1"
            if words.startswith("No space") else "/runs/m/events.out.tfevents.1")
    # TensorFlow maps ENOSPC, EDQUOT and EMFILE to RESOURCE_EXHAUSTED, the class of running out of memory
    parser, work = fail_with(tf.errors.ResourceExhaustedError(
        None, None, f"Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call last):\n"
                    f"  File \"job.py\", line 1\n{path}; {words}\n\t [[{{{{node save/SaveV2}}}}]]"))
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"job.py: error: {advice}"), line
    assert "memory" not in line and "--batch-size" not in line and "\n" not in line


def test_a_file_where_the_run_makes_a_folder_is_one_line_naming_it(capsys, tmp_path):
    """A file at <model dir>/export: the export's FailedPreconditionError was a traceback."""
    import tensorflow as tf
    (tmp_path / "export").write_text("")
    try:
        tf.io.gfile.makedirs(str(tmp_path / "export" / "temp-1"))
    except tf.errors.OpError as e:
        error = e
    parser, work = fail_with(error)
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"job.py: error: a file operation failed: is not a directory ({tmp_path / 'export'})") \
        and "a part of that path is a file, not a folder: move that file away" in line \
        and "\n" not in line, line
    relative = tf.errors.FailedPreconditionError(None, None, "runs/m/export is not a directory")
    parser, work = fail_with(relative)
    assert run_command(parser, work, []) == 1
    assert "failed: runs/m/export is not a directory;" in capsys.readouterr().err
    on_a_bucket = tf.errors.FailedPreconditionError(None, None, "gs://b/m/export is not a directory")
    parser, work = fail_with(on_a_bucket)
    assert run_command(parser, work, []) == 1
    assert "gs://b cannot be reached or written" in capsys.readouterr().err  # the URL's words, not a local path's


@pytest.mark.parametrize("records_dir", [None, "/shards"])
def test_a_truncated_shard_is_named_with_how_to_make_it_again(capsys, tmp_path, records_dir):
    """It read 'truncated record at 2156' failed with Read less bytes than requested', naming no fix."""
    import tensorflow as tf
    path = str(tmp_path / "train-00000-of-00001.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"x" * 5000)
    with open(path, "r+b") as f:
        f.truncate(3000)
    try:
        list(tf.data.TFRecordDataset(path))
    except tf.errors.DataLossError as e:
        error = e
    parser, work = fail_with(error)
    parser.add_argument("--records-dir", default=records_dir)
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("job.py: error: a TFRecord file this run reads is cut short or damaged (") and \
        len(line.splitlines()) == 1, line
    fix = ("remove /shards/manifest.json, then make the shards of --records-dir /shards again (scripts/prepare_oct.py "
           "--out /shards, with the --image-size they were made at)") if records_dir \
        else "remove the prepared shards it reads (the data dir's tfrecords folder) to have them made again"
    assert fix in line, line


def test_a_broken_pipe_that_is_not_stdout_is_named_as_a_failed_file_operation(capsys):
    """Only a closed stdout (`| head`) is 'the program reading this output closed it': a subprocess's or a
    socket's broken pipe is the operation's failure, with its path."""
    parser, work = fail_with(BrokenPipeError(errno.EPIPE, "Broken pipe", "/runs/m/events.out"))
    assert run_command(parser, work, []) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Broken pipe (/runs/m/events.out)" in line and "reading this output" not in line, line


def test_a_checkpoint_of_another_graph_names_only_the_flags_this_job_has():
    """train_oct.py was told to resume with 'the same --model', a flag it does not have."""
    import tensorflow as tf
    from pipeline.cli import _tensorflow_failure
    from pipeline.flags import build_parser
    from pipeline.tasks.fashion import TASK as FASHION
    from pipeline.tasks.images import TASK as IMAGES
    from pipeline.tasks.oct import TASK as OCT
    error = tf.errors.NotFoundError(None, None, "Restoring from checkpoint failed. Key dense/kernel/Adam not found in "
                                                "checkpoint")
    said = {task.name: _tensorflow_failure(error, build_parser(task).parse_args(["--model-dir", "/m"]))
            for task in (FASHION, OCT, IMAGES)}
    assert "(the same --precision or --optimizer, say)" in said["fashion"]
    assert "(the same --trainable-layers, --precision, --image-size or --optimizer, say)" in said["oct"]
    assert "(the same --model, --trainable-layers, --precision, --image-size or --optimizer, say)" in said["images"]
    assert all(line.startswith("the checkpoint in /m does not fit the model these flags build (Restoring from "
                               "checkpoint failed. Key dense/kernel/Adam not found in checkpoint); resume with the "
                               "flags it was trained with") for line in said.values())


def test_a_summary_writer_s_full_disk_is_one_line_and_its_thread_s_traceback_stays_off_stderr(capsys, monkeypatch):
    """TensorFlow's EventLoggerThread fails its write, prints its traceback, and the writer raises a
    RuntimeError (not an OpError) in the main thread at the next flush: a run resumed on a full disk
    ended in both."""
    import threading
    import tensorflow as tf  # noqa: F401 - the errors told apart are TensorFlow's
    shown = []  # what reaches the hook that prints a thread's traceback
    monkeypatch.setattr(threading, "excepthook", lambda failure: shown.append(type(failure.exc_value)))
    words = "/runs/m/eval_validation/events.out.tfevents.1.vm; No space left on device"
    parser = argparse.ArgumentParser(prog="job.py")
    parser.add_argument("--model-dir", default="/runs/m")

    def in_a_thread(target, name=None):
        thread = threading.Thread(target=target, name=name)
        thread.start()
        thread.join()

    def work(args):
        in_a_thread(lambda: (_ for _ in ()).throw(RuntimeError(words)), name="EventLoggerThread")
        raise RuntimeError(f"{words}\n\tFailed to flush 2 events")
    assert run_command(parser, work, []) == 1
    err = capsys.readouterr().err
    assert shown == [] and len(err.strip().splitlines()) == 1, err
    assert err.startswith("job.py: error: a write failed: No space left on device (/runs/m/eval_validation/"
                          "events.out.tfevents.1.vm); the disk is full: free some space on it, or pass another "
                          "--model-dir; then run the same command"), err
    # another thread's error is shown as before, a full disk's too (nothing raises it again), and the hook is
    # put back
    assert run_command(parser, lambda args: in_a_thread(lambda: 1 / 0), []) == 0
    assert run_command(parser, lambda args: in_a_thread(lambda: (_ for _ in ()).throw(OSError(28, words))), []) == 0
    assert shown == [ZeroDivisionError, OSError] and threading.excepthook.__name__ == "<lambda>"


@pytest.mark.parametrize("gpus, cpu_replicas, current, expected", [
    (None, None, None, None), (None, None, "2,3", "2,3"),  # every GPU it sees
    (2, None, None, "0,1"), (1, None, "2,3", "2"), (2, None, "GPU-a, GPU-b,GPU-c", "GPU-a,GPU-b"),  # the first N
    (0, None, None, "-1"), (None, 2, "0,1", "-1"), (None, 1, None, "-1"),  # none: on the CPU
    (3, None, "4,5", "4,5"),  # more than it lists: left for the run to say how many it sees
])
def test_a_run_shows_tensorflow_only_the_gpus_it_trains_on(gpus, cpu_replicas, current, expected):
    from pipeline.gpu_visibility import visible_gpus
    assert visible_gpus(gpus, cpu_replicas, current) == expected


@pytest.mark.parametrize("gpus, current, expected", [
    (2, None, "0"), (2, "2,3", "2"), (4, "GPU-a,GPU-b", "GPU-a"),  # one GPU of the trainers' --gpus N
    (None, "2,3", "2,3"), (0, None, "-1"),  # no --gpus: as a trainer (it counts the GPUs it sees as theirs)
])
def test_a_cluster_s_evaluator_is_shown_one_gpu_of_the_trainers_gpus(gpus, current, expected, monkeypatch):
    """It was shown --gpus N, and TensorFlow reserved the memory of each in its sessions, to evaluate on one."""
    from cluster.tf_config import names_an_evaluator
    from pipeline.gpu_visibility import visible_gpus
    assert visible_gpus(gpus, None, current, evaluator=True) == expected
    evaluator = {"cluster": {"chief": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}
    assert names_an_evaluator({"TF_CONFIG": json.dumps(evaluator)})
    assert not names_an_evaluator({"TF_CONFIG": json.dumps({**evaluator, "task": {"type": "chief", "index": 0}})})
    assert not names_an_evaluator({"TF_CONFIG": "{not json"}) and not names_an_evaluator({})
    monkeypatch.setenv("TF_CONFIG", json.dumps(evaluator))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    from pipeline.cli import set_tensorflow_environment
    set_tensorflow_environment(types.SimpleNamespace(gpus=2, cpu_replicas=None))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


@pytest.mark.parametrize("argv, expected", [(["--gpus", "1"], "3"), (["--cpu-replicas", "2"], "-1"), ([], "3,7")])
def test_a_job_s_command_line_narrows_the_visible_gpus_before_tensorflow_starts(monkeypatch, argv, expected):
    """With --gpus 0 or --cpu-replicas TensorFlow placed a single-device run's ops on GPU 0 all the same, and
    every session reserved the memory of every GPU it saw."""
    from pipeline.cli import set_tensorflow_environment
    from pipeline.flags import build_parser
    from pipeline.tasks.fashion import TASK
    monkeypatch.setattr(os, "environ", dict(os.environ, CUDA_VISIBLE_DEVICES="3,7"))
    set_tensorflow_environment(build_parser(TASK).parse_args(["--synthetic", *argv]))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == expected


def test_under_slurm_a_task_takes_its_gpus_from_its_share_of_the_node(monkeypatch):
    """Where Slurm allotted no GPUs, its resolver shares the node's among the tasks, setting CUDA_VISIBLE_DEVICES
    (when it is unset): narrowed before that, every task took GPUs 0..N-1."""
    import json
    from types import SimpleNamespace
    from pipeline import cluster_run
    from pipeline.cli import set_tensorflow_environment
    from pipeline.flags import build_parser
    from pipeline.tasks.fashion import TASK
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})
    set_tensorflow_environment(build_parser(TASK).parse_args(["--synthetic", "--cluster", "slurm", "--gpus", "1"]))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ

    def resolved(port_base, ps):  # as TF's SlurmClusterResolver does for the second of two tasks on 4 GPUs
        os.environ["CUDA_VISIBLE_DEVICES"] = "2,3"
        return {"cluster": {"chief": ["n1:8888"], "worker": ["n1:8889"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setattr(cluster_run, "slurm_tf_config", resolved)
    settings = SimpleNamespace(cluster="slurm", slurm_port_base=8888, slurm_ps=0, gpus=1, cpu_replicas=None)
    assert cluster_run.resolve_cluster(settings) is not None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2" and json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "worker"
    os.environ["CUDA_VISIBLE_DEVICES"] = "5,6"  # allotted by Slurm (gres): narrowed at once, as on one machine
    set_tensorflow_environment(build_parser(TASK).parse_args(["--synthetic", "--cluster", "slurm", "--gpus", "1"]))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


@pytest.mark.parametrize("argv, expected", [(["--gpus", "1,2"], "0,1"), (["--cpu-replicas", "1,2"], "-1"),
                                            ([], "-1")])
def test_a_benchmark_shows_tensorflow_only_the_gpus_it_sweeps(monkeypatch, tmp_path, argv, expected):
    from benchmark import cli as benchmark_cli
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})
    parser = benchmark_cli.build_benchmark_parser()
    benchmark_cli.parse_args(parser, ["--task", "fashion", "--output", str(tmp_path / "b"), *argv])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == expected
