# cellbench: tool calling vs code cells, one job per episode.
#
#   snakemake                        # the grid of config.yaml, then tables and figures
#   snakemake figures                # tables and figures from the traces on disk, no episodes
#   snakemake --configfile configs/paper.yaml
#
# How to run (cores, scheduler, cluster) lives in workflow/profiles/; what to
# run lives in workflow/rules/.


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/episodes.smk"
include: "workflow/rules/analysis.smk"


# The grid itself is asked for, not only what is drawn from it: Snakemake
# does not rebuild a missing file that up-to-date tables were made from, so
# listing every episode.json and the database here is what makes a deleted
# trace (or database) come back with a plain `snakemake`; the tables and
# figures are then refreshed because their input changed.  `snakemake
# figures` asks for none of this (common.smk, "figures without episodes").
rule all:
    default_target: True
    input:
        EPISODE_FILES,
        DATABASE,
        "results/tables",
        "figures",
