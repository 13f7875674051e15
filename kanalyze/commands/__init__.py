"""Subcommands: each module has `add_parser(subparsers)` and sets `run` on its parser."""
