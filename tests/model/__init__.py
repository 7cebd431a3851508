"""The lease protocol's model for the SPIN model checker (lease.pml), and how it is run
(tests.model.spin); `python -m tests.model` checks it."""
