"""``python -m dse.cli``: the same as the ``dse`` command."""

from dse.cli.app import main

main()
