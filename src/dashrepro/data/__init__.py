"""Data: real datasets loaded and normalised to one schema (``datasets``), and the student
and privileged-teacher prompts (``prompts``)."""
