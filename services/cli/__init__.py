"""The ``wiscat`` command, a module per command group.

::

    app         the parser, built top-down, and main(): settings, logging, dispatch, exit status
    serve       run, provider, harvester (the services) and migrate
    harvest     harvest NAME: one run of a link now
    records     ingest, delete, generate: the own set's records
    links       link add|list|set|remove|runs|quarantine|test: every action on a link
    checks      check, checks add|list|remove|reports
    registry    registry keygen|init-network|add-member|peers|sync|status
    settings    settings: every setting and where it comes from
    backup      backup, restore: the whole database in one file (pg_dump, pg_restore)
    database    the migrated database (and pool) a command works on
    signals     the stop signals
    arguments   argparse types, and the help page (examples, exit statuses) of every command
    output      tables, times and JSON as the commands print them

A module lower in the list never imports one above it (an import-linter contract says so).
"""

from wiscat.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
