"""``python -m graphprep.trainer [embed] ...`` and the ``graphprep-trainer`` console script:
training (the default) or, with ``embed`` first, inference over every node."""
import os
import sys


def console_main(prog: str | None = None) -> None:
    """Run ``embed`` when it is the first argument, else training; never returns."""
    prog = prog or os.path.basename(sys.argv[0])
    if len(sys.argv) > 1 and sys.argv[1] == "embed":
        from graphprep.trainer.tasks.embed import main as embed_main
        embed_main(args=sys.argv[2:], prog_name=f"{prog} embed")
    else:
        from graphprep.trainer.cli import main
        main(prog_name=prog)


if __name__ == "__main__":
    console_main("python -m graphprep.trainer")
