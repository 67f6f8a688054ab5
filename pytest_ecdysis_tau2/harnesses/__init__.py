"""Named harnesses the τ² suite registers (see `registration.py`)."""
