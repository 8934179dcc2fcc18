"""webdataset's error handlers: handler(exn) returns True to skip the item, False to stop the
pass, or raises. The same functions serve the C++ stages (which know them by identity) and the
Python ones."""

from ._wdscpp import (  # noqa: F401
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
