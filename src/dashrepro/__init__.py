"""dashrepro: the reference pipeline for on-policy self-distillation (OPSD) and DASH.

Each stage of the Snakemake workflow is a thin call into one subpackage: ``data``,
``embedded``, ``objectives``, ``training``, ``sampling``, ``evaluation``, ``grading``,
``premise`` (the premise probe at a base model), ``analysis``, ``provenance``, ``experiment``
(what a config means). The stages import the shared
cores (``io``, ``layout``, ``adapters``, ``hub``, ``settings``) and earlier stages, never
each other in a circle (``tests/test_import_graph.py``). What each package holds:
docs/architecture.md.
"""

__version__ = "0.1.0"
