"""From graded checkpoints to the paper's outputs: best-checkpoint selection, tables, figures."""
