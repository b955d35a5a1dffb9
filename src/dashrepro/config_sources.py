"""Which file set a config key, told by Snakemake's parse to the jobs it starts.

A job sees its params, not the files they came from; an error a job finds in a key (a device
this machine lacks) should still name the file, like the errors of validation do. So the parse
(``experiment.config.snakemake_config_sources``) records the files and the file that set each
job-checked key in an environment variable, which every job inherits (a local job, the job
server's forks, and a cluster job, whose own Snakemake parses the same files again).
Standard library only: the parse imports it, and so does a job before torch.

    record("workflow_config.yaml + config/experiments/x.yaml", {"evaluation.device": "..."})
    set_in("evaluation.device")      # "set in config/experiments/x.yaml"
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

#: The environment variable that carries the record: {"label": ..., "origins": {key: file}}.
VARIABLE = "DASHREPRO_CONFIG_SOURCES"


def record(label: str, origins: Mapping[str, str | None]) -> None:
    """Record, for this process and the jobs it starts, what the configuration was merged
    from (``label``) and which of those files set each key of ``origins``."""
    os.environ[VARIABLE] = json.dumps({"label": label, "origins": dict(origins)})


def set_in(key: str) -> str:
    """Where ``key`` was set, in words: ``set in <file>``; ``in the configuration merged from
    <files>`` where no file set it (a default); ``in the job's parameters`` where nothing was
    recorded (a job started outside Snakemake)."""
    try:
        recorded = json.loads(os.environ.get(VARIABLE, ""))
        label, origins = recorded["label"], recorded["origins"]
    except (ValueError, KeyError, TypeError):
        return "in the job's parameters"
    origin = origins.get(key) if isinstance(origins, Mapping) else None
    return f"set in {origin}" if origin else f"in the configuration merged from {label}"
