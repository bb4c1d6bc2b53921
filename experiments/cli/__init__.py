"""The `deer` command: the only click code of the toolkit.  One root group registers every
subcommand; each is a thin shell over the Python API (``deer.probe``, ``bear_ref.*``,
``experiments.*``), with the options written once in ``experiments.cli.options``."""

from __future__ import annotations

import sys

import click

from experiments.cli.cloze import cloze
from experiments.cli.experiments import experiment
from experiments.cli.info import backends, data, models, probes
from experiments.cli.options import OneValueGroup
from experiments.cli.probes import bear_dataset, probe

# 0.1's KG commands, gone before 0.2 (they were read until 0.3): what to type instead, and for their options
REMOVED_COMMANDS = {
    "bear": ("deer probe --probe bear", "--pll-variant X is --probe-option pll_variant=X"),
    "lama": ("deer probe --probe lama", "--with-deer is --probe lama,deer; --single-token is --probe-option single_token=true"),
}


class DeerGroup(OneValueGroup):
    """The `deer` group: a command of 0.1's is refused saying what to type instead (not click's "No such command")."""

    def resolve_command(self, ctx, args):
        if args and args[0] in REMOVED_COMMANDS:
            command, options = REMOVED_COMMANDS[args[0]]
            raise click.UsageError(f"`deer {args[0]}` is gone (0.1's spelling): type `{command}` ({options})", ctx)
        return super().resolve_command(ctx, args)


@click.group(cls=DeerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="deer-probe-toolkit", prog_name="deer")
@click.option("--debug", is_flag=True, help="Show the traceback of an error instead of a one-line message (or DEER_DEBUG=1).")
@click.pass_context
def main(ctx, debug):
    """Probe what a language model knows about a knowledge graph.

    \b
    deer probe         DEER: PromptEOL embeddings of queries and described tails, cosine ranking
                       (--probe NAME: any registered probe; --backend plain: one whole pass per text)
                       (--probe bear: BEAR, summed log-likelihood of every statement;
                        --probe lama: LAMA, the tail's first-token log-probability;
                        --probe lama,deer,bear: several on one model load, one ranks table)
    deer bear-dataset  the BEAR score of the BEAR / BEAR-big data set
    deer cloze         DEER, LAMA and BEAR side by side on LAMA or the BEAR data set
    deer experiment NAME   compute-time, token-bias, agreement, screen
    deer models        which models are known and installed
    deer probes        the registered probes and their options; deer backends: the model backends
    deer data          which data sets were found, and where; `deer data fetch NAME` downloads one
    """
    ctx.meta["deer.debug"] = debug


for _command in (probe, bear_dataset, cloze, experiment, models, probes, backends, data):
    main.add_command(_command)

if __name__ == "__main__":
    sys.exit(main())
