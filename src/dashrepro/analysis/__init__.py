"""From graded checkpoints to the paper's outputs: best-checkpoint selection, tables, figures,
the statistics beside every cell, and the expected results (``expected_results``, from a run's
``run_facts``) with the comparison of a run against them (``reproduction``)."""
