"""What every PyTorch trainer of a project needs from Vertex and no user edits.

Imports torch, so it is outside the package's standard-library core: a PyTorch trainer imports
these modules, the other variants never do.
"""
