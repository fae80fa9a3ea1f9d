"""What every layer above the data may use of trio: the current runtime, worker threads."""
