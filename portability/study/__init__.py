"""``portability study``: the founding experiment. The same architectures, defined once per source
framework in the model zoo (``models/``), are trained on offline datasets, exported with each framework's
own tools, deployed through ``check`` to every server, web and mobile target, and compared.

- ``zoo``: where the zoo is, each framework's Python, training as a subprocess, the trained-model cache;
- ``run``: the study's plan (framework × architecture × dataset) and its rows (one ``check`` per model);
- ``tables``: the study's views (terminal and Markdown) from its JSON.
"""
