"""gpugov's admission webhook: GPU request translation, tenancy, clear refusals."""
