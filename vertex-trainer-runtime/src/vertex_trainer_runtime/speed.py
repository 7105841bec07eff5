"""The clock arithmetic behind every trainer's speed lines, written once: steps between two
clock reads, the seconds between them, and the seconds of named pauses (checkpoints,
evaluation) that a trainer either takes out of its training time or reports beside it.

The framework subpackages (``keras``, ``torch``, ``xgboost``: their ``throughput`` modules)
name the figures and feed the timer from their callbacks. The timer reads the clock only when
an interval starts or ends and around a pause, never per step; each interval and pause also
goes to the job ledger (``vertex_trainer_runtime.ledger``), for ``make report``. The GPUs'
peak (``peak_tflops``) is here too: every framework's MFU divides by the same table.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from vertex_trainer_runtime import ledger

# Dense (no sparsity) bf16 tensor-core peak per GPU in TFLOPS, from NVIDIA's data sheets; T4 and
# V100 have no bf16 tensor cores: their fp16 peak. H100 PCIe's is lower than the SXM part's.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "T4": 65.0, "V100": 125.0}
H100_PCIE_TFLOPS = 756.0
_GPU_NAME = re.compile(r"\b(H200|H100|A100|L4|T4|V100)\b")


def peak_tflops(device_name: str) -> float | None:
    """The GPU's dense peak by its name (``torch.cuda.get_device_name``, TensorFlow's
    ``device_name`` detail); None if unknown."""
    match = _GPU_NAME.search(device_name.upper())
    if match is None:
        return None
    if match.group(1) == "H100" and "PCIE" in device_name.upper():
        return H100_PCIE_TFLOPS
    return PEAK_TFLOPS[match.group(1)]


@dataclass(frozen=True)
class Interval:
    """``steps`` done in ``seconds`` of wall-clock time, ``paused`` of them in named pauses."""

    steps: int
    seconds: float
    paused: float = 0.0

    def without_pauses(self) -> Interval:
        """The same steps, timed without the pauses: the training alone."""
        return Interval(self.steps, self.seconds - self.paused)

    def per_second(self, amount: float) -> float:
        """``amount`` (examples, rows, rounds) per second; 0.0 for an interval of no time."""
        return amount / self.seconds if self.seconds > 0 else 0.0

    def seconds_per_step(self) -> float:
        """Mean seconds per step; 0.0 for an interval of no steps."""
        return self.seconds / self.steps if self.steps else 0.0

    def __add__(self, other: Interval) -> Interval:
        return Interval(
            self.steps + other.steps, self.seconds + other.seconds, self.paused + other.paused
        )


class IntervalTimer:
    """Marks on one clock: ``start`` a run at a step, take a ``lap`` at later steps (the
    interval since the last mark), ``since_start`` for the run so far; ``timing(what)`` adds a
    block's seconds to the pause ``what`` (``seconds[what]``, ``counts[what]``).

    ``clock`` is injectable (tests pass a fake one); ``mark`` is ``(time, step, paused
    seconds)`` at the interval's start, None before ``start``.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.counts: defaultdict[str, int] = defaultdict(int)
        self.paused_total = 0.0  # all pauses' seconds, kept so that a lap needn't add them up
        self.mark: tuple[float, int, float] | None = None
        self.started = 0.0
        self.first_step = 0
        self._paused_at_start = 0.0

    def start(self, step: int) -> None:
        """The run (or this ``fit``) starts now, ``step`` steps already done (a resumed run's)."""
        self.started = self.clock()
        self.first_step = step
        self._paused_at_start = self.paused_total
        self.mark = (self.started, step, self.paused_total)
        ledger.record("step_start_time", step_count=step)

    def lap(self, step: int) -> Interval:
        """The interval from the mark to now, ending after ``step``; now becomes the mark. The
        job ledger gets it as a range of steps."""
        now = self.clock()
        since, since_step, paused_before = self.mark
        self.mark = (now, step, self.paused_total)
        interval = Interval(step - since_step, now - since, self.paused_total - paused_before)
        if interval.steps > 0:
            ledger.current().steps(since_step + 1, step, interval.seconds, interval.paused)
        return interval

    def since_start(self, step: int) -> Interval:
        """The run from ``start`` to now, ending after ``step``; the mark stays."""
        return Interval(
            step - self.first_step,
            self.clock() - self.started,
            self.paused_total - self._paused_at_start,
        )

    @contextlib.contextmanager
    def timing(self, what: str) -> Iterator[None]:
        """Add the block's seconds to the pause ``what``, also when it raises."""
        began = self.clock()
        try:
            yield
        finally:
            seconds = self.clock() - began
            self.seconds[what] += seconds
            self.counts[what] += 1
            self.paused_total += seconds
            ledger.record("pause", kind=what, seconds=seconds)

    def timed(self, what: str, function: Callable) -> Callable:
        """``function``, each call's seconds added to the pause ``what``."""

        def measured(*args, **kwargs):
            with self.timing(what):
                return function(*args, **kwargs)

        return measured
