"""pyinfra facts that read node state; the parsing lives in pure functions in rdmaprov.parsers."""
