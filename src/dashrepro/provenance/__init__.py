"""Provenance: what every output was made from (``records``), written from the job (``job``).

A job's record also hashes the model folders' files it read beside its declared inputs
(``model_files``: an adapter's or a base model's config, tokenizer files, chat template);
``audit`` checks a table cell's whole chain against the files as they are now.

python -m dashrepro.provenance results/tiny/tables/main_results.csv   # the chain of a file
"""

from dashrepro.provenance.records import (
    code_version,
    discard_records,
    orphan_records,
    record_path,
    trace,
    write_provenance,
)

__all__ = [
    "code_version",
    "discard_records",
    "orphan_records",
    "record_path",
    "trace",
    "write_provenance",
]
