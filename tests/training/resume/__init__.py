"""Tests of dashrepro.training.resume, one file per private module (a package, so that their
basenames may repeat other folders'); the trainer's real-process resumes after kill -9 and
preemption are tests/training/test_trainer_resume.py's."""
