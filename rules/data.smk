# Data: the training set and the benchmarks, each normalised to one schema
# (id, problem, reference_solution, answer, source) with a report of every dropped row; and the
# embedded model's tokenizer. A dataset is either synthetic (the embedded default) or real: a local
# file checked against its sha256, or a Hugging Face id at a pinned revision (config `dataset`).


rule make_synthetic_data:
    output:
        **EXPERIMENT.validation_outputs(LAYOUT.synthetic),
        train=LAYOUT.synthetic(TRAIN_DATA),
        benchmarks=[
            LAYOUT.synthetic(f"benchmarks/{b}.parquet")
            for b in EXPERIMENT.synthetic_benchmarks
        ],
    log:
        LAYOUT.log("make_synthetic_data"),
    benchmark:
        LAYOUT.job_timing("make_synthetic_data")
    conda:
        "../envs/cpu.yaml"
    params:
        data=EXPERIMENT.synthetic_data_params(),
        benchmarks=EXPERIMENT.synthetic_benchmark_specs(),
    script:
        "scripts/make_synthetic_data.py"


rule prepare_training_set:
    input:
        unpack(get_training_set_source),
    output:
        **EXPERIMENT.validation_outputs(LAYOUT.data),
        train=LAYOUT.data(TRAIN_DATA),
        report=LAYOUT.data("train.report.json"),
    log:
        LAYOUT.log("prepare_training_set"),
    benchmark:
        LAYOUT.job_timing("prepare_training_set")
    conda:
        "../envs/cpu.yaml"
    params:
        dataset=config["data"]["training_set"],
        validation=EXPERIMENT.validation,
    script:
        "scripts/prepare_training_set.py"


rule prepare_benchmark:
    input:
        unpack(get_benchmark_source),
    output:
        benchmark=LAYOUT.benchmark(),
        report=LAYOUT.benchmark(suffix="report.json"),
    log:
        LAYOUT.log("prepare_benchmark", "{bench}"),
    benchmark:
        LAYOUT.job_timing("prepare_benchmark", "{bench}")
    conda:
        "../envs/cpu.yaml"
    params:
        dataset=lambda wc: config["benchmarks"][wc.bench]["dataset"],
        n_problems=lambda wc: config["benchmarks"][wc.bench]["n_problems"],
    script:
        "scripts/prepare_benchmark.py"


rule train_tokenizer:
    input:
        train=LAYOUT.data(TRAIN_DATA),
    output:
        tokenizer=LAYOUT.tokenizer(),
    log:
        LAYOUT.log("train_tokenizer"),
    benchmark:
        LAYOUT.job_timing("train_tokenizer")
    conda:
        "../envs/cpu.yaml"
    params:
        vocab_size=config["data"]["tokenizer_vocab_size"],
        protocol=config["protocol"],
    script:
        "scripts/train_tokenizer.py"
