"""An experiment: what a config asks the workflow to do, in one place.

- ``config``: loading a config and its overlays, the schema (``config_schema.yaml``) and the
  cross-field rules, each error naming the key and the file that set it;
- ``parameters``: the registries of aggregations and training objectives, with the ranges of
  their hyper-parameters and a method's training keys;
- ``run_matrix``: the method grids and scales expanded, and the (method, scale, seed) runs;
- ``workflow``: what the rules ask of an experiment (files, settings, report contexts);
- ``plan``: the jobs and GPU-hours a target will cost.

Torch-free, like everything Snakemake imports while it parses the workflow.
"""
