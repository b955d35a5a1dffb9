"""Data: real datasets loaded and normalised to one schema (``datasets``, built on ``layouts``,
``reading`` and ``report``), and the student and privileged-teacher prompts (``prompts``)."""
