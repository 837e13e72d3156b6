"""The one error type the pipeline shows to users as a one-line message."""


class ConfigError(ValueError):
    """A configuration value that cannot run; the message names the key and the value."""
