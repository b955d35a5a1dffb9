"""Audit a table cell: its chain back to the raw generations, every hash on it checked again, the
number derived again; and a report over every cell of an experiment.

A cell of a scores table (kinds ``method_scores`` and ``seed_statistics``: one row per method)
is the mean over seeds of each seed's selected checkpoint's Avg@k. Its chain, file by file:

    table CSV (its record names the selection files and their sha256)
      -> per seed: selection JSON (the selected step, every candidate's score)
        -> per candidate: graded samples.parquet and summary.json (grade_checkpoint's record)
          -> responses.parquet, the raw generations (generate_checkpoint_responses's record)
            -> the adapter, and the training run's record: its config (method, train, LoRA,
               protocol), the training data's and the base model's sha256 (a hub model's commit),
               the code version

A cell copied from another paper (source other than "this run") says where it was copied from.

``--verify`` checks every recorded input hash on the chain against the file as it is now,
derives the summaries, the selection and the cell again from the graded samples (``--regrade``:
from the raw responses, through the grader), and names every difference; the command then
exits 1. So a changed grade, a swapped adapter, an edited summary, selection or table is caught
and named. ``--report`` audits every cell of every scores table and writes Markdown and HTML
flagging changed or stale inputs, cells whose chain mixes code versions or configurations, and
cells with fewer seeds than the run matrix declares.

    dashrepro audit main_results dash tiny aime2025
    dashrepro audit main_results dash tiny aime2025 --verify --regrade
    dashrepro audit --report --results results/tiny

One module per part: ``chain`` (follow a cell), ``verify`` (check it), ``report`` (every cell,
Markdown and HTML) and ``cli`` (``dashrepro audit``).
"""
