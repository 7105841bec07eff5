"""What every Keras trainer of a project needs from Vertex and no user edits.

Imports TensorFlow and Keras, so it is outside the package's standard-library core: a Keras
trainer imports these modules, the other variants never do.
"""
