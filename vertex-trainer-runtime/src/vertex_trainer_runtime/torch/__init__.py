"""What every PyTorch trainer of a project needs from Vertex and no user edits.

Imports torch, so it is outside the package's standard-library core: a PyTorch trainer imports
these modules, the other variants never do. Torch's (as ``ray.train.torch``): the run in its
fixed order (``run``, with ``reporting``), torchrun across replicas (``distributed``), the
Hugging Face checkpoint mirror (``checkpoint_mirror``), the notice per step
(``preemption_hook``), the training order, padding and speed figures, and the data files'
checks (``input_files``).
"""
