"""What every XGBoost trainer of a project needs from Vertex and no user edits.

Imports xgboost, so it is outside the package's standard-library core: an XGBoost trainer imports
these modules, the other variants never do.
"""
