"""Tests of dashrepro.training.recipe: what the recipe hands over when a state is due (the
step loop itself runs end to end in test_trainer_resume.py and test_deepspeed.py)."""

from types import SimpleNamespace

from dashrepro.training.recipe import DistillationRecipe
from dashrepro.training.resume import TrainingState


def test_the_recipe_hands_its_state_to_the_checkpointer_after_the_trackers():
    calls = []
    recipe = DistillationRecipe.__new__(DistillationRecipe)
    recipe.state = TrainingState(policy=None, optimizer=None, scheduler=None, step=20)
    recipe.state.records.rows.append({"step": 20})
    recipe.save_at = {20, 40}
    # The steps kept for a tracker go out before the state a resume would start after.
    recipe.tracking = SimpleNamespace(flush=lambda rows: calls.append(("flush", list(rows))))
    recipe.checkpointer = SimpleNamespace(
        save=lambda state, export: calls.append(("save", state, export))
    )
    recipe.save_checkpoint()
    assert calls == [("flush", [{"step": 20}]), ("save", recipe.state, True)]
    recipe.state.step = 21  # a state between checkpoints (preemption, the time budget)
    recipe.save_checkpoint()
    assert calls[-1] == ("save", recipe.state, False)
