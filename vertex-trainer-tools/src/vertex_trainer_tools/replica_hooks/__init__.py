"""Test hooks for the replicas of a test's job: ``sitecustomize.py`` loads ``drill_hooks`` into
every Python process that has this folder on its path (see ``drill_hooks``)."""
