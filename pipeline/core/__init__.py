"""The shared core under every step (and the Dask-free part of it under the trainer): the Dask
cluster and task runner, the step skeleton, array ops, worker recycling, process memory, the
console and click's types. Imports only :mod:`graphprep.formats` beside third-party packages."""
