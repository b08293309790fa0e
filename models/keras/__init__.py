"""The study's architectures in Keras 3 (channels-last images ``[N, 28, 28, 1]``, int32 token ids
``[N, L]``), built from ``models.spec`` with built-in layers only (a ``.keras`` file loads in safe mode);
``python -m models.keras.train`` trains and exports them."""
