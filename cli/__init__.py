"""tidings.cli: the `tidings` command (typer), for people and scripts; needs the `cli` extra."""
