"""The study's architectures in PyTorch (channels-first images ``[N, 1, 28, 28]``, int32 token ids
``[N, L]``), built from ``models.spec``; ``python -m models.torch.train`` trains and exports them."""
