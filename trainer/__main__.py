import sys

if len(sys.argv) > 1 and sys.argv[1] == "embed":
    from .tasks.embed import main as embed_main
    embed_main(args=sys.argv[2:], prog_name="python -m trainer embed")
else:
    from .cli import main
    main(prog_name="python -m trainer")
