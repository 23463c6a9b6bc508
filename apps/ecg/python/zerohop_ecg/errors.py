"""The one error type for anything about the job's input or arguments: the command line prints
its message on one line and exits with status 2, without a traceback."""


class EcgInputError(ValueError):
    """Bad input, arguments or environment for the ECG job; the message says what to change."""
