"""Report the tuning metric to Vertex AI hyperparameter tuning, from the chief only.

Vertex reads the metric from the file that ``cloudml-hypertune`` writes; the tag must equal the
``metricId`` of the study in ``vertex.yaml``. Only the chief reports, so workers of a
distributed trial never overwrite its measurements.
"""

from __future__ import annotations

import logging
import math

logger = logging.getLogger(__name__)


class MetricReporter:
    """``report(value, step)`` forwards to cloudml-hypertune when ``enabled`` (the chief)."""

    def __init__(self, tag: str, enabled: bool = True):
        self.tag = tag
        self.enabled = enabled
        self._hypertune = None
        if enabled:
            import hypertune  # cloudml-hypertune: in prebuilt images; requirements.txt elsewhere

            self._hypertune = hypertune.HyperTune()

    def report(self, value: float, step: int) -> None:
        if not self.enabled:
            return
        value = float(value)
        if not math.isfinite(value):
            logger.warning(
                "Not reporting %s=%s at step %d: not a finite number", self.tag, value, step
            )
            return
        self._hypertune.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=self.tag, metric_value=value, global_step=int(step)
        )
        logger.info("Reported %s=%.6g at step %d for hyperparameter tuning", self.tag, value, step)
