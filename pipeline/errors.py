"""Errors the command lines turn into a one-line message and a non-zero exit.

Importable without TensorFlow: every room's error type is defined in a module
that does not import it.
"""
from cluster.peers import PEER_LOST_EXIT
from cluster.tf_config import ClusterConfigError
from acquisition.errors import InputDataError
from models import WeightsUnavailableError
from reporting import RunsError
from serving import ConversionError, ExportNotFoundError, ViewsUnavailableError


class UsageError(Exception):
    """A flag value or environment that the job cannot run with; the message says what to change."""


class FlagError(UsageError):
    """A flag value that only the data shows to be wrong (a class the data does not have, say):
    exit 2, as argparse gives a bad flag."""
    exit_code = 2


class TrainingError(Exception):
    """Training cannot go on (the loss diverged, say); the message says what to change."""


class PeerLostError(TrainingError):
    """A cluster task this one needs has gone: exit PEER_LOST_EXIT, which schedulers retry (cluster.peers)."""
    exit_code = PEER_LOST_EXIT


USER_ERRORS = (UsageError, InputDataError, WeightsUnavailableError, TrainingError, ClusterConfigError,
               ExportNotFoundError, ConversionError, ViewsUnavailableError, RunsError)
