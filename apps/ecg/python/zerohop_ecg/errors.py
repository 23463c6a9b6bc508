"""The one error type for anything about the job's input or arguments: the command line prints
its message on one line and exits with status 2, without a traceback. The readers' own typed
errors (MissingCellError: a cell with no number) come from the Rust crate."""

from ._native import MissingCellError

__all__ = ["EcgInputError", "MissingCellError"]


class EcgInputError(ValueError):
    """Bad input, arguments or environment for the ECG job; the message says what to change."""
