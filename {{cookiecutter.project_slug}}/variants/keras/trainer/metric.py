"""The hyperparameter-tuning metric's name, in a module without TensorFlow so that config checks
can import it cheaply. It must equal ``hpt.metric.id`` in vertex.yaml."""

METRIC = "accuracy"  # Keras logs it for the eval set as val_accuracy
