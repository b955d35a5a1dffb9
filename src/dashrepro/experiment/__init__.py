"""An experiment: what a config asks the workflow to do, in one place.

- ``config``: loading a config and its overlays, the schema (``config_schema.yaml``, with the
  typed settings' descriptions put in) and the cross-field rules, each error naming the key and
  the file that set it;
- ``semantics``: the rules across keys that the schema cannot say;
- ``run_matrix``: the method grids and scales expanded, and the (method, scale, seed) runs;
- ``workflow``: what the rules ask of an experiment (files, settings, report contexts);
- ``pins``: every download pinned to a commit before the first job;
- ``plan``: the jobs and GPU-hours a target will cost;
- ``config_reference``: the configuration reference page, from the schema.

The aggregations' and objectives' parameters and ranges are ``objectives.registry``'s; a
method's training keys, ``training.methods``'. Torch-free, like everything Snakemake imports
while it parses the workflow.
"""
