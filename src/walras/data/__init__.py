"""Data files shipped inside the package (read with :mod:`importlib.resources`, never from disk
paths next to the repository). Each subfolder keeps its licence notice beside its files."""
