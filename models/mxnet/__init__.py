"""The study's architectures in MXNet Gluon (1.9.1), trained in MXNet's own environment
(``portability setup mxnet``; ``python -m models.mxnet.train``). Importing this package imports nothing:
:func:`import_mxnet` applies the numpy shim MXNet 1.9.1 needs and imports it."""
from __future__ import annotations

import os


def import_mxnet(threads: int | None = None):
    """``mxnet``, imported after the ``np.bool = bool`` shim (numpy 1.24 removed the alias MXNet 1.9.1
    still uses). ``threads`` caps its OpenMP pool when set before the first import."""
    if threads is not None:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", str(threads))
    import numpy as np

    if np.__dict__.get("bool") is not bool:
        np.bool = bool
    import mxnet

    return mxnet
