"""portability: does a trained model still work, and how well, once it leaves its framework?

Importing this package is cheap: no deep-learning framework is imported here.
"""
__version__ = "0.1.0"
