"""Loaded by every Python process that has this folder on its path: the drills' test hooks
(``drill_hooks``), which act only on their own environment variables."""

import drill_hooks

drill_hooks.install()
