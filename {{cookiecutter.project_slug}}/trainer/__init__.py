"""Vertex AI custom-training package: ``python -m trainer.task``.

YOURS TO CHANGE: nothing here, it only makes ``trainer`` a package; its modules are yours.
"""
