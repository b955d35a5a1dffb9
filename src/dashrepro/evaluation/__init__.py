"""Evaluation of a checkpoint, in the DAG's three steps.

- ``responses``: sample k responses per benchmark problem (rule ``generate_checkpoint_responses``);
- ``grade``: grade the stored responses (rule ``grade_checkpoint``);
- ``scoring``: summarise graded samples into Avg@k, and check a stored summary against them
  (read by selection and the figures).
"""
