"""The study's model zoo: each architecture defined once per source framework (``models/torch``,
``models/keras``, ``models/mxnet``), from one framework-free description of its hyper-parameters
(``models/spec.py``), trained on offline datasets (``models/data.py``) by one training command per
framework (``python -m models.<framework>.train``; contract in ``models/common.py``).

Nothing here is imported by ``import portability``; ``portability study`` runs the training commands as
subprocesses (MXNet's in its own environment)."""
