"""Control plane: queues, quotas, fair share, admission, gang, preemption, scheduling cycle."""
