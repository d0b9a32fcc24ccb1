"""Kaggle datasets: signing in with the `kaggle` package, and downloading a dataset's archive under
a watchdog that ends a download which has stalled (the client sets no timeout of its own)."""
import contextlib
import io
import logging
import os
import signal
import threading
import time

from acquisition.errors import DownloadError

log = logging.getLogger(__name__)
CREDENTIALS_HELP = "put kaggle.json (Kaggle > Settings > API > Create New Token) in ~/.kaggle/ or set " \
                   "KAGGLE_USERNAME and KAGGLE_KEY"


def sign_in(dataset, fallback):
    """Returns an authenticated KaggleApi; raises DownloadError when there are no credentials.

    `fallback` ends each message: what to do instead of downloading `dataset`.
    """
    sink = io.StringIO()
    try:
        # `import kaggle` authenticates at import time and prints a help text on
        # failure; the message below replaces it.
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            from kaggle.api.kaggle_api_extended import KaggleApi
            api = KaggleApi()
            api.authenticate()
    except SystemExit:
        raise DownloadError(f"no Kaggle credentials to download {dataset}: {CREDENTIALS_HELP}, or {fallback}") \
            from None
    except Exception as e:  # token checks reach the network; offline they fail here
        raise DownloadError(f"Kaggle sign-in failed ({_first_line(e)}): {CREDENTIALS_HELP}, or {fallback}") from None
    return api


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _download_error(error, dataset, fallback):
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status in (401, 403):
        return DownloadError(
            f"Kaggle refused the download of {dataset} (HTTP {status}): check your credentials and "
            f"accept the dataset's terms at https://www.kaggle.com/datasets/{dataset}, or {fallback}")
    return DownloadError(f"cannot download {dataset} from Kaggle ({_first_line(error)}); check the network, "
                         f"or {fallback}")


class _Stalled(Exception):
    pass


@contextlib.contextmanager
def watch_progress(folder, stall_seconds, every_seconds=10.0, report=None, what="the dataset"):
    """Logs the bytes written under `folder` and their rate every `every_seconds` while the block
    runs, and ends the block with _Stalled when none were written for `stall_seconds`.

    The Kaggle client sets no timeout on its requests, so a network that accepts a
    connection but never answers would hang it forever. This works by SIGALRM,
    in the main thread only (elsewhere the block runs unwatched).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    report = report or log.info
    start = last_change = time.monotonic()
    state = {"bytes": 0}

    def tick(signum, frame):
        now = time.monotonic()
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files
                   if os.path.exists(os.path.join(d, f)))
        nonlocal last_change
        if size > state["bytes"]:
            state["bytes"], last_change = size, now
            report(f"downloading {what}: {size / 1e6:.0f} MB so far, {size / 1e6 / (now - start):.1f} MB/s")
        elif now - last_change >= stall_seconds:
            raise _Stalled()

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, every_seconds, every_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def download_archive(dataset, staging, api_factory, stall_seconds, fallback):
    """Downloads `dataset`'s zip archive into the folder `staging`; returns the archive's path.

    `api_factory()` returns a signed-in KaggleApi (see sign_in). Raises DownloadError, ending with
    `fallback`, when the download fails, is refused, or writes nothing for `stall_seconds`.
    """
    try:
        with watch_progress(staging, stall_seconds, every_seconds=min(10.0, stall_seconds / 2), what=dataset):
            api = api_factory()
            api.dataset_download_files(dataset, path=staging, quiet=True, unzip=False)
    except _Stalled:
        raise DownloadError(f"the download of {dataset} from Kaggle made no progress for {stall_seconds:g} s; "
                            f"check the network (a proxy or firewall that holds connections open?), or {fallback}") \
            from None
    except DownloadError:
        raise
    except Exception as e:  # requests' ConnectionError / HTTPError, kagglesdk errors
        raise _download_error(e, dataset, fallback) from None
    archives = [f for f in os.listdir(staging) if f.endswith(".zip")]
    if not archives:
        raise DownloadError(f"the Kaggle download of {dataset} produced no zip archive")
    return os.path.join(staging, archives[0])
