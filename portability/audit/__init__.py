"""Audits: many models checked as ``check`` checks one.

``corpus`` (the models of a folder or manifest, and the state folder that makes an audit resumable),
``unit`` (one model checked: the unit of work every executor runs), ``run`` (the audit, on the local
executor or the Ray one in ``ray_executor``) and ``conformance`` (ONNX's own node tests as a corpus, each
case with its expected outputs). Built over the check (``portability.engine``)."""
