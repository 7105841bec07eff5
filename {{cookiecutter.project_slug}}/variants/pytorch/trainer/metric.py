"""The tuning metric's name, in a module without torch or transformers.

``METRIC`` is the tag reported to Vertex hyperparameter tuning and must equal ``hpt.metric.id``
in vertex.yaml; config checks import it from here without installing the framework.
"""

METRIC = "accuracy"  # eval accuracy of the model that is exported, reported last
