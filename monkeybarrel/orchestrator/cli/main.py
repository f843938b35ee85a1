"""Command line: ``monkeybarrel run | demo | report | validate | show | compare | export | store | sweep | reproduce``.

Every user-facing error (config, data, store, I/O, encoding, missing model, unreachable server)
exits with status 2 and one message naming the file or key; Ctrl-C exits 130 after the stages
have written every finished candidate and score.

Each subcommand is a module of this package (``COMMANDS``) with ``add_parser(sub)`` and
``run(args) -> exit status``; a module imports what its command needs inside ``run``, so ``--help``,
``--version`` and a refused argument answer at once. A new subcommand is a module plus its name in
``COMMANDS``. ``sweep`` (``cli/sweep.py``) parses its own arguments: ``main`` hands it the rest.
Warnings of monkeybarrel's own modules (Weaver's, the sandbox's) print as one ``warning:`` line on
stderr, without the source line Python would add (``errors.route_warnings``).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from .arguments import Parser
from .demo import demo_config_path  # noqa: F401  (public here: tests and docs name it)

COMMANDS = ("run", "demo", "report", "validate", "show", "compare", "export", "store", "reproduce")
"""Subcommand modules of ``monkeybarrel.orchestrator.cli``, in ``--help`` order."""
OWN_PARSER = {"sweep": "run, track and compare a grid of experiments (`sweep -h`)"}
"""Subcommands with their own parser (``cli/<name>.py``'s ``main(argv) -> exit status``); errors are handled here."""


QUIET_DEPENDENCIES = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1",
                      "TOKENIZERS_PARALLELISM": "false"}
"""Environment defaults (a value the user set wins): transformers' advisories, weight-loading and GGUF
conversion bars (tqdm), the hub's download bars, and the tokenizers fork warning are not the experiment's
output (ours are rich progress bars)."""


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("monkeybarrel")
        except PackageNotFoundError:
            from ... import __version__ as number
        print(f"monkeybarrel {number}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="monkeybarrel", epilog="`monkeybarrel COMMAND -h` describes a command's options; bad input exits 2.",
        description="Test-time compute and verification: sample many candidates per problem, score them with "
                    "weak verifiers, select one answer per problem, and measure what the compute bought.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = import_module(f".{name}", __package__)
        module.add_parser(sub).set_defaults(handler=module.run)
    for name, help_text in OWN_PARSER.items():
        sub.add_parser(name, add_help=False, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for variable, value in QUIET_DEPENDENCIES.items():  # dependencies' notices and bars stay out of normal output
        os.environ.setdefault(variable, value)
    if argv[:1] and argv[0] in OWN_PARSER:
        module = import_module(f".{argv[0]}", __package__)
        command = lambda: module.main(argv[1:])  # noqa: E731
    else:
        args = build_parser().parse_args(argv)
        command = lambda: args.handler(args)  # noqa: E731
    from .errors import route_warnings, user_message

    route_warnings()
    try:
        return command()
    except KeyboardInterrupt:
        print("interrupted: every finished candidate and score is stored; run the same command again to resume",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # `monkeybarrel show DIR | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 — user errors become one line; anything else is a bug: traceback
        message = user_message(exc)
        if message is None:
            raise
        return fail(message)


def fail(message: str) -> int:
    """Print ``error: message`` on stderr; exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
