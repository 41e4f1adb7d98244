"""Day-2 work on a running cluster: drift checks, rolling applies, bringing new nodes in."""
