"""The check: plan, pipeline, verdict and sessions.

Targets run in worker processes through one seam, ``portability.workers`` (a typed ``Job`` in, a typed
``WorkerResult`` out); nothing here imports the worker machinery's modules. Built on the foundations in
``portability.core`` (which import nothing from here); the features over the check live in packages of
their own: ``audit``, ``explain`` (localize, fix), ``settings``."""
