"""Audit a table cell: its chain back to the raw generations, every hash on it checked again, the
number derived again; and a report over every cell of an experiment.

A scores-table cell is the mean over seeds of each seed's selected checkpoint's Avg@k; its
chain runs table -> selection -> graded samples and summary -> raw responses -> adapter and
training record (docs/audit.md). ``--verify`` re-checks every recorded hash and re-derives the
cell (``--regrade``: through the grader); ``--report`` audits every cell of every scores table.
One module per part: ``chain``, ``verify``, ``report`` and ``cli`` (``dashrepro audit``).

    dashrepro audit main_results dash tiny aime2025
    dashrepro audit main_results dash tiny aime2025 --verify --regrade
    dashrepro audit --report --results results/tiny
"""
