"""portability: does a trained model still work, and how well, once it leaves its framework?

Importing this package is cheap: no deep-learning framework is imported here.

    import portability
    report = portability.check("model.onnx", targets=["web", "mobile"], dataset="data.npz")
    assert report.passed, [t.id for t in report.targets if t.failed]
"""
__version__ = "0.1.0"


def check(model, targets="server", dataset=None, **options):
    """Run a check and return its Report (see ``portability.api.check`` for every option)."""
    from portability.api import check as _check

    return _check(model, targets, dataset, **options)
