"""`python -m trainer.config --config X [overrides] [--world-size N]`: print the resolved TOML.

Runs every check a launch would (including the mesh for WORLD_SIZE, or --world-size N, a flag of
this tool only), so a config can be tried on a laptop before it goes to the cluster.
Exit status: 0 and the TOML on stdout; 2 and `error: <message>` on stderr for a config error;
141, silently, when the reader of stdout left early (`--help | head`).
"""

from __future__ import annotations

import os
import sys
import warnings

from trainer.config import ConfigError, config_to_toml, load_config, validate_config


def _pop_world_size(argv: list[str]) -> tuple[int | None, list[str]]:
    rest: list[str] = []
    world: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--world-size":
            if i + 1 >= len(argv):
                raise ConfigError("command line: --world-size needs a number")
            world, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--world-size="):
            world = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    if world is None:
        return None, rest
    if not world.isdigit() or int(world) < 1:
        raise ConfigError(f"command line: --world-size {world!r}: expected an integer >= 1")
    return int(world), rest


def _env_world_size() -> int:
    """$WORLD_SIZE (trainer.parallel.dims.env_world_size), refused as a config error with this
    tool's way out."""
    from trainer.parallel.dims import env_world_size

    try:
        return env_world_size()
    except ValueError as e:
        raise ConfigError(f"{e}; or give the launch's world size with --world-size N") from e


def main(argv: list[str]) -> int:
    given = world_size = None
    # The config's warnings as one `warning:` line each, not Python's file:line form with a source line.
    with warnings.catch_warnings(record=True) as caught:
        try:
            given, argv = _pop_world_size(argv)
            if "--help" in argv or "-h" in argv:
                print("python -m trainer.config: print the resolved config; --world-size N checks the "
                      "mesh for N ranks (default: $WORLD_SIZE or 1).\n")
            cfg = load_config(argv)
            world_size = given
            if world_size is None:
                world_size = _env_world_size()
            validate_config(cfg, world_size)
        except ConfigError as e:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
            hint = ""
            if given is None and world_size is not None and "world size" in str(e):
                hint = (f" (checked for a world size of {world_size}, from $WORLD_SIZE or the default 1: "
                        "give the launch's with --world-size N)")
            print(f"error: {e}{hint}", file=sys.stderr)
            return 2
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    sys.stdout.write(config_to_toml(cfg))
    return 0


if __name__ == "__main__":
    try:
        try:
            status = main(sys.argv[1:])
        finally:  # a buffered tail (also --help's, which leaves by SystemExit) meets the pipe here
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader left early (`--help | head -3`): stop quietly, as tools that SIGPIPE ends do,
        # with their status, 128 + 13. stdout goes to /dev/null first, or the flush at exit fails
        # again (the recipe of Python's signal module documentation, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    sys.exit(status)
