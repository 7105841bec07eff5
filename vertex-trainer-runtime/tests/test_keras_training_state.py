"""``vertex_trainer_runtime.keras.training_state``: a checkpoint keeps the names projects baked
before this module moved into the runtime wrote (so they resume from them), restores where it was
taken, and a newer step without its marker is discarded (run in a Keras project's env)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("keras")
np = pytest.importorskip("numpy")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from vertex_trainer_runtime import checkpoints  # noqa: E402
from vertex_trainer_runtime.keras import distributed, training_state  # noqa: E402


def tiny_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def state_of(model, root) -> training_state.TrainingState:
    consensus = distributed.Consensus(tf.distribute.get_strategy(), distributed=False)
    return training_state.TrainingState(model, str(root), consensus)


def test_a_checkpoint_keeps_its_names_and_resumes_where_it_was_taken(tmp_path):
    model = tiny_model(1)
    model.fit(np.ones((8, 3)), np.zeros((8, 2)), batch_size=4, epochs=1, verbose=0)  # 2 steps
    state = state_of(model, tmp_path)
    state.save(epochs_done=1, steps_into_epoch=1)
    state.close()

    folder = tmp_path / f"{checkpoints.PREFIX}2"
    assert (folder / f"{training_state.FILE_PREFIX}.index").is_file()
    marker = json.loads((folder / checkpoints.MARKER).read_text())
    assert {"epochs_done", "steps_into_epoch", "global_step", "precision"} <= set(marker)

    fresh = tiny_model(2)
    position = state_of(fresh, tmp_path).restore()
    assert position == training_state.Position(epochs_done=1, steps_into_epoch=1)
    assert int(fresh.optimizer.iterations.numpy()) == 2
    for saved, restored in zip(model.weights, fresh.weights, strict=True):
        np.testing.assert_array_equal(saved.numpy(), restored.numpy())


def test_no_checkpoint_starts_at_epoch_one_and_a_newer_unmarked_step_is_removed(tmp_path):
    partial = tmp_path / f"{checkpoints.PREFIX}7"
    partial.mkdir()  # a step whose copy never finished: no marker
    assert state_of(tiny_model(1), tmp_path).restore() == training_state.Position()
    assert not partial.exists()
