"""The example model ``graphprep.trainer.examples.sparse_sage`` (installed with the trainer, so it imports from
any folder), kept importable by its repository path from the repository's root:
``--model examples.models.sparse_sage:build``."""
from graphprep.trainer.examples.sparse_sage import *  # noqa: F401,F403
from graphprep.trainer.examples.sparse_sage import build  # noqa: F401
