"""pyinfra operations: each decides from facts and yields only the commands needed (none when converged)."""
