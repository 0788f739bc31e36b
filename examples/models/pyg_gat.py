"""The example model ``graphprep.trainer.examples.pyg_gat`` (installed with the trainer, so it imports from
any folder), kept importable by its repository path from the repository's root:
``--model examples.models.pyg_gat:build``."""
from graphprep.trainer.examples.pyg_gat import *  # noqa: F401,F403
from graphprep.trainer.examples.pyg_gat import build  # noqa: F401
