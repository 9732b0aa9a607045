"""Subcommands of the `lifecycle` CLI, one module each (see `lifecycle.cli.COMMANDS`)."""
