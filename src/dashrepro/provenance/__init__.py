"""Provenance: what every output was made from (``records``), written from the job (``job``).

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
