"""webdataset's error handlers: handler(exn) returns True to skip the item, False to stop the
pass, or raises. Python functions (so that pipelines holding them pickle); the C++ stages run
their engine counterparts (filters._engine_handler)."""

import time
import warnings


def reraise_exception(exn):
    """Raises exn: the pass ends with it (the default)."""
    raise exn


def ignore_and_continue(exn):
    """Skips the item."""
    return True


def warn_and_continue(exn):
    """Warns with exn and skips the item."""
    warnings.warn(repr(exn))
    time.sleep(0.5)  # as webdataset: a burst of failures does not flood the log
    return True


def ignore_and_stop(exn):
    """Ends the pass quietly."""
    return False


def warn_and_stop(exn):
    """Warns with exn and ends the pass."""
    warnings.warn(repr(exn))
    time.sleep(0.5)
    return False
