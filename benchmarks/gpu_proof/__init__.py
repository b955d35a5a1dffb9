"""The GPU proof: the cluster code paths on one GPU at the paper's Qwen3-1.7B shapes, each stage
in a process of its own, run and measured; ``--shape tiny`` is its CPU twin (the tests').

    python benchmarks/gpu_proof --out DIR [--shape tiny] [--stages ...] [--lanes ...]
    python benchmarks/gpu_proof --out DIR --costs    # GPU-hours from DIR/summary.json

``__main__.py`` is the command line (its docstring: how a lease runs it), ``shapes.py`` the
shapes, stages and limits, ``runner.py`` the stages' subprocesses, lanes and measurements,
``summary.py`` the table and the GPU-hours report, ``common.py`` what the stages share, and
``stages/`` one module per stage. Nothing here imports torch until a stage runs.
"""
