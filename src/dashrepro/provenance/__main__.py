"""``python -m dashrepro.provenance OUTPUT...``: print the provenance chain of outputs."""

from dashrepro.provenance.records import main

main()
