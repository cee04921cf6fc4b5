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


rule all:
    default_target: True
    input:
        "results/tables",
        "figures",
