"""The example model ``graphprep.trainer.examples.pyg_gcn`` (installed with the trainer, so it imports from
any folder), kept importable by its repository path from the repository's root:
``--model examples.models.pyg_gcn:build``."""
from graphprep.trainer.examples.pyg_gcn import *  # noqa: F401,F403
from graphprep.trainer.examples.pyg_gcn import build  # noqa: F401
