"""Subcommands of the ``gputenant`` CLI, one module each.

Every module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
"""
