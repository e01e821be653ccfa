"""The ``shuangkou`` application: the command line that stands on every other package.

``python -m shuangkou`` and the ``shuangkou`` console script both run :func:`shuangkou.cli.main`.
Nothing inside the project imports this package (tests/test_layering.py).
"""
