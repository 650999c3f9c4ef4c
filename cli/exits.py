"""Exit codes every ``hotboard`` command shares, so scripts and orchestrators can tell outcomes apart."""

EXIT_OK = 0
#: The named board (or other object) does not exist (``boards delete``: also a board deleted already).
EXIT_NOT_FOUND = 1
#: Invalid settings, arguments or input, or a refused request: retrying unchanged will not help.
EXIT_CONFIG = 2
#: A server (Kafka, Redis) could not be reached in time: retrying later may help.
EXIT_UNAVAILABLE = 3
#: A process the command started and stopped did not exit cleanly (``hotboard demo``: a child's own code is shown).
EXIT_FAILED = 4


class Refused(Exception):
    """A request a command will not carry out; the message is the one line the user sees, ``code`` the exit."""

    def __init__(self, message: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(message)
        self.code = code
