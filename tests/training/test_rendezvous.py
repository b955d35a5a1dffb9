"""Multi-process training jobs meet on a port the OS chooses (``distributed.launch_command``).

accelerate's default port, 29500, is one per node: two 4-GPU runs started at once on one 8-GPU
node would race for it. Two 2-process CPU jobs started at once through the workflow's launch
command both finish, each on a port of its own, neither of them 29500.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_trainer_resume import adapter, write_run

from dashrepro.training.distributed import launch_command


@pytest.mark.slow
def test_two_multi_process_jobs_started_at_once_meet_on_ports_of_their_own(
    tmp_path, tiny_setup, default_config
):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    jobs = []
    for name in ("a", "b"):
        spec = write_run(tmp_path / f"{name}.json", tiny_setup, default_config, tmp_path / name,
                         steps=1, checkpoint_every=1, micro_batch_size=1, max_new_tokens=4)  # fmt: skip
        log = open(tmp_path / f"{name}.log", "w")
        process = subprocess.Popen(
            launch_command(spec, 2), stdout=log, stderr=subprocess.STDOUT, env=env
        )
        jobs.append((process, log))
    ports = []
    for process, log in jobs:
        code = process.wait(timeout=600)
        log.close()
        text = Path(log.name).read_text()
        assert code == 0, text[-3000:]
        ports += re.findall(r"\[train\] 2 processes met at [^:\s]+:(\d+)", text)
    assert len(ports) == 2 and len(set(ports)) == 2 and "29500" not in ports, ports
    # Each job trained its own adapter, in its own folder, from the same spec.
    first, second = adapter(tmp_path / "a", 1), adapter(tmp_path / "b", 1)
    assert first.keys() == second.keys()
    assert all(bool((first[k] == second[k]).all()) for k in first)
