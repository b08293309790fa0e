"""Target lives in the foundations (``portability.core.target``); the registry modules import it from here."""
from portability.core.target import Target, load_class

__all__ = ["Target", "load_class"]
