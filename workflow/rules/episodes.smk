# One job per episode: `cellbench play` writes the episode's trace directory;
# its episode.json (written last, atomically) marks the episode complete.  It
# holds the directory's lock meanwhile (agents/trace.py) and stops if this
# run's main process dies (agents/runwatch.py).
#
# The grid comes from config (agents.config.episode_grid): it is irregular, so
# the targets are listed, not expanded.  Repeat 0 lives in seed{seed}, a later
# repeat in a subdirectory r1, r2, ... of it (the `repeat_dir` wildcard is
# empty for repeat 0).
#
# What a job holds: 1 thread (the scripted planner keeps a core busy) and
# EPISODE_MEM_MB.  An episode whose planner is an endpoint waits on it most
# of its time: workflow/profiles/remote-planner runs those with 0 threads
# (--set-threads episode=0), so memory, not cores, bounds how many run at once
# (--resources mem_mb=...; README, "Running a paid grid").

#: Resident memory one episode may reach, MiB: the agent loop (~120) plus the
#: runtime child at its peak, measured with benchmarks/episode_cost.py: 700-970
#: MiB on LIBERO-PRO/LIBERO-90/10 scenes, 1,270 for libero_10_swap/0's first
#: build, 900 on the two-arm scenes; rounded up for what cells allocate.
EPISODE_MEM_MB = 1536


rule episode:
    input:
        episode_gate,
    output:
        "results/episodes/{benchmark}/{ablation}/{agent}/{suite}/{task_index}/seed{seed}{repeat_dir}/episode.json",
    log:
        "logs/episodes/{benchmark}/{ablation}/{agent}/{suite}/{task_index}/seed{seed}{repeat_dir}.log",
    wildcard_constraints:
        benchmark="|".join(benchmark_groups()),
        ablation="|".join(ABLATIONS),
        agent="|".join(AGENTS),
        suite=r"[A-Za-z0-9_.-]+",
        task_index=r"[A-Za-z0-9_.-]+",
        seed=r"\d+",
        repeat_dir=r"(/r[1-9]\d*)?",
    params:
        repeat=repeat_index,
        call_budget=call_budget,
        # Tracked: a changed planner, budget or episode limit reruns the
        # episode; new tasks, seeds or prices do not.
        settings=episode_settings,
        # Untracked (a param derived from the output): the effective config's
        # name changes with every config edit, which alone must not rerun
        # anything.  See EFFECTIVE_CONFIG in common.smk.
        config=lambda wildcards, output: EFFECTIVE_CONFIG,
        trace_dir=lambda wildcards, output: os.path.dirname(output[0]),
    threads: 1
    resources:
        runtime=episode_runtime_min,
        mem_mb=EPISODE_MEM_MB,
    conda:
        "../envs/cellbench.yaml"
    shell:
        "cellbench play --benchmark {wildcards.benchmark}"
        " --task {wildcards.suite}/{wildcards.task_index} --seed {wildcards.seed}"
        " --agent {wildcards.agent} --ablation {wildcards.ablation} --repeat {params.repeat}"
        " --call-budget {params.call_budget} --config {params.config}"
        " --out {params.trace_dir} > {log} 2>&1"
