"""Resumable training state: where a run's state is saved, checked and restored.

The recipe holds one ``TrainingState`` (the learner, the last finished step, the ``RunRecords``)
and hands it to its ``Checkpointer``, which saves it under ``<out_dir>/.resume`` (``RESUME_DIR``),
exports each declared checkpoint from it and, on a rerun, restores the newest state that checks
out: every file against its sha256, once; the config once; a damaged newest state discarded for
the one before it; a state of another config or other inputs discarded, the differing key named.
The private modules, one idea each: ``_state`` (the state object and its records' files),
``_folder`` (one state folder: layout, format version, write, check, load), ``_fingerprint`` (a
run config's fingerprint and differences), ``_rng`` (every generator's state), ``_retention``
(which state a resume takes, what is pruned: states and DeepSpeed's engine folders) and
``_checkpointer`` (all of it across processes, with the log). A damaged file raises
``StateFileError``, naming it. Details: docs/training.md.
"""

from dashrepro.training.resume._checkpointer import RESUME_DIR, Checkpointer
from dashrepro.training.resume._folder import StateFileError
from dashrepro.training.resume._state import RunRecords, TrainingState

__all__ = ["RESUME_DIR", "Checkpointer", "RunRecords", "StateFileError", "TrainingState"]
