# Data: the training set and the benchmarks, each normalised to one schema
# (id, problem, reference_solution, answer, source) with a report of every dropped row; and the
# embedded model's tokenizer. A dataset is either synthetic (the embedded default) or real: a local
# file checked against its sha256, or a Hugging Face id at a pinned revision (config `dataset`).


rule make_synthetic_data:
    output:
        **validation_outputs(f"{RESULTS}/data/synthetic"),
        train=f"{RESULTS}/data/synthetic/train.parquet",
        benchmarks=[
            f"{RESULTS}/data/synthetic/benchmarks/{b}.parquet"
            for b in SYNTHETIC_BENCHMARKS
        ],
    log:
        f"{RESULTS}/logs/make_synthetic_data.log",
    benchmark:
        f"{RESULTS}/benchmarks/make_synthetic_data.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        data=synthetic_data_params(),
        benchmarks=synthetic_benchmark_specs(),
    script:
        "scripts/make_synthetic_data.py"


rule prepare_training_set:
    input:
        unpack(training_set_source),
    output:
        **validation_outputs(f"{RESULTS}/data"),
        train=f"{RESULTS}/data/train.parquet",
        report=f"{RESULTS}/data/train.report.json",
    log:
        f"{RESULTS}/logs/prepare_training_set.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_training_set.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        dataset=config["data"]["training_set"],
        validation=VALIDATION,
    script:
        "scripts/prepare_training_set.py"


rule prepare_benchmark:
    input:
        unpack(benchmark_source),
    output:
        benchmark=f"{RESULTS}/data/benchmarks/{{bench}}.parquet",
        report=f"{RESULTS}/data/benchmarks/{{bench}}.report.json",
    log:
        f"{RESULTS}/logs/prepare_benchmark/{{bench}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_benchmark/{{bench}}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        dataset=lambda wc: config["benchmarks"][wc.bench]["dataset"],
        n_problems=lambda wc: config["benchmarks"][wc.bench]["n_problems"],
    script:
        "scripts/prepare_benchmark.py"


rule train_tokenizer:
    input:
        train=f"{RESULTS}/data/train.parquet",
    output:
        tokenizer=f"{RESULTS}/tokenizer/tokenizer.json",
    log:
        f"{RESULTS}/logs/train_tokenizer.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_tokenizer.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        vocab_size=config["data"]["tokenizer_vocab_size"],
        protocol=config["protocol"],
    script:
        "scripts/train_tokenizer.py"
