"""Exceptions that mean "the user asked for something invalid".

Every user-facing mistake (bad config, bad data file, impossible parameter) raises a subclass of
:class:`UserError`. The command line catches exactly these, prints one line naming the problem and
exits with status 2 on every rank; anything else is a bug and gets a traceback.
"""


class UserError(Exception):
    """Base class: a problem in the user's input, reported as one readable message."""


class ConfigError(UserError, ValueError):
    """Invalid experiment configuration: unknown name or key, wrong type, value out of range."""


class DataError(UserError, ValueError):
    """A data file is missing, unreadable or malformed, or a partition is impossible."""


class PayloadError(ValueError):
    """A compressed payload is truncated, corrupted or does not match the expected dimension."""
