"""``python -m mirage``: the ``core`` program."""

from mirage.builtins import main

main()
