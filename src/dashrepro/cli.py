"""The ``dashrepro`` console command (installed with the package): one subcommand per tool.

dashrepro audit main_results dash tiny aime2025 --verify    # a cell's chain, checked
dashrepro audit --report                                    # every cell of an experiment
dashrepro compare tiny                                      # did this run reproduce the page?
"""

from __future__ import annotations

import sys

COMMANDS = {
    "audit": "dashrepro.provenance.audit.cli:run_cli",
    "compare": "dashrepro.analysis.reproduction:run_cli",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: dashrepro {{{','.join(COMMANDS)}}} ...  (dashrepro <command> --help)")
        return 2
    import importlib

    module, function = COMMANDS[argv[0]].split(":")
    return getattr(importlib.import_module(module), function)(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
