"""Subcommands of the ``gputenant`` CLI, one module each.

Every module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``. A
command that cannot go on raises CommandError; ``gputenant.cli.main`` prints its one line and
exits with its code, so no user sees a traceback for a missing cluster or a bad file.
"""

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_SATISFIABLE = 3
"""`render` and `explain`: every file is valid but a tenant's decision is not possible (its reason is
printed), so a GitOps pipeline that runs them before merge refuses the change."""


def decided_exit_code(results) -> int:
    """0 when every tenant's decision is possible, else EXIT_NOT_SATISFIABLE."""
    return 0 if all(result.decision.possible for result in results) else EXIT_NOT_SATISFIABLE


class CommandError(Exception):
    """What stops a command, in one line naming what was tried and what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code
