"""The orchestration of a check: plan, pipeline, verdict, options and settings files, sessions, audits.

Targets run in worker processes through one seam, ``portability.workers`` (a typed ``Job`` in, a typed
``WorkerResult`` out); nothing here imports the worker machinery's modules. Built on the foundations in
``portability.core`` (which import nothing from here)."""
