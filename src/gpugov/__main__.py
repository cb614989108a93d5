"""`python -m gpugov …` runs the `gpugov` command (child processes use it: no console script
needed, and the same interpreter and package as the parent)."""

from gpugov.cli import app

if __name__ == "__main__":
    app(prog_name="gpugov")  # usage lines say `gpugov`, not `python -m gpugov`
