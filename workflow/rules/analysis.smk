# Traces -> one DuckDB database -> tables and figures.  Tables and figures
# read only the database; how `snakemake figures` avoids episodes is in
# common.smk ("figures without episodes").  These jobs are cheap and want
# every trace at hand: they run on the submitting machine, never on a node.


rule ingest:
    input:
        ingest_inputs,
    output:
        "results/traces.duckdb",
    params:
        config=EFFECTIVE_CONFIG,
        code=ANALYSIS_CODE,
    log:
        "logs/ingest.log",
    localrule: True
    conda:
        "../envs/cellbench.yaml"
    shell:
        # --strict: a corrupt trace stops the tables (naming the file) instead of silently thinning them.
        "cellbench ingest --strict --results results/episodes --db {output} --config {params.config} > {log} 2>&1"


rule report:
    input:
        db="results/traces.duckdb",
    output:
        directory("results/tables"),
    params:
        config=EFFECTIVE_CONFIG,
        code=ANALYSIS_CODE,
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../envs/cellbench.yaml"
    shell:
        "cellbench report --db {input.db} --out {output} --config {params.config} > {log} 2>&1"


# The figure commands read only the database; the tables are an input so that
# `snakemake figures` refreshes tables and figures both, as the README promises.
# The results browser (results/site/index.html) is drawn with the figures it shows.
rule figures:
    input:
        db="results/traces.duckdb",
        tables="results/tables",
    output:
        figures=directory("figures"),
        site=directory("results/site"),
    params:
        config=EFFECTIVE_CONFIG,
        code=ANALYSIS_CODE,
    log:
        "logs/figures.log",
    localrule: True
    conda:
        "../envs/cellbench.yaml"
    shell:
        "(cellbench figures --db {input.db} --out {output.figures} --config {params.config}"
        " && cellbench browse --db {input.db} --out {output.site} --figures {output.figures}"
        " --config {params.config}) > {log} 2>&1"
